/* What every benchmark needs: a monotonic wall clock and sorting for
 * medians (BENCHMARKS.md quotes medians; the machines are shared). */
#ifndef TEST_BENCH_H
#define TEST_BENCH_H

#include <stdlib.h>
#include <time.h>

static inline double tb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int tb_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place and returns its median. */
static inline double tb_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, tb_cmp_double);
    return n ? v[n / 2] : 0;
}

#endif
