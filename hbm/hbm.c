#include "hbm/hbm.h"

double hbm_peak_bps(const hbm_params *p)
{
    return (double)p->channels * p->bus_bytes * p->data_rate_gtps * 1e9;
}

void hbm_set_peak_gbs(hbm_params *p, double gbs)
{
    p->data_rate_gtps = gbs / ((double)p->channels * p->bus_bytes);
}
