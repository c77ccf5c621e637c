/* params — the hardware of a TPU v2/v3 chip and pod slice, as data.
 *
 * Every value lives in one table in emu/params.c with its source ([C]
 * confirmed in the named source, [D] derived from [C] values, [U]
 * unconfirmed and assumed).  `--set KEY=VALUE` overrides any entry by name.
 */
#ifndef EMU_PARAMS_H
#define EMU_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "emu/status.h"
#include "hbm/hbm.h"
#include "interconnect/ici.h"
#include "mxu/mxu.h"

typedef struct {
    int gen;                 /* 2 or 3 */
    double clock_hz;         /* TensorCore clock */
    int cores_per_chip;
    int mxus_per_core;
    mxu_params mxu;
    int vpu_lanes;           /* vector unit lanes */
    int vpu_sublanes;        /* vector unit sublanes */
    int vpu_alus;            /* ALUs per lane x sublane */
    double vmem_bytes;       /* vector memory per core */
    int lane_pad;            /* minor dim padded to this multiple (lanes) */
    int sublane_pad;         /* second-minor padded to this multiple */
    double mxu_op_overhead_cycles; /* per matmul instruction: issue, drain sync */
    double vpu_op_overhead_cycles; /* per vector instruction */
    int xla_halo_copy;       /* 1: a halo'd input is concatenated into a new
                                buffer before the convolution reads it */
    int xla_conv_pad;        /* 1: convolution operands padded as the Cloud
                                TPU guide says (batch/feature to 8/128) */
    int xla_conv_batch_threshold; /* most common conv batch below which
                                the small-batch padding applies */
    int xla_conv_pad_batch;  /* 1: that padding includes the batch (to the
                                sublanes); 0: features only */
    int xla_conv_pad_min_features; /* inputs with fewer features fold their
                                taps into K even under that layout */
    int xla_batch_lanes;     /* 1: layout assignment may put the batch on
                                the lanes when that pads less than the
                                channels or the width */
    int xla_halo_fused;      /* 1: each split dimension's concatenate, pad,
                                slice and mask are one fused pass */
    int xla_dw_halo;         /* 1: the weight-gradient conv exchanges the
                                activation's halo again (HaloExchangeOnLHS) */
    int xla_bn_stats_fused;  /* 1: batchnorm's forward statistics come out
                                of the producing convolution's epilogue; 0:
                                a reduction pass reads the activation */
    int xla_bn_apply_fused;  /* 1: batchnorm's normalise (and a following
                                relu) is applied as its consumers read the
                                activation: no pass, nothing stored */
    int xla_dw_allreduce;    /* 1: each spatially partitioned weight
                                gradient is all-reduced over the partition
                                group as it is computed */
    int xla_remat;           /* 1: when a training step does not fit in HBM,
                                activations cheap to recompute are dropped and
                                recomputed in the backward pass */
    double kernel_overhead_ns; /* fixed cost of starting a kernel (one
                                layer's pass: its first matrix or vector
                                instruction) */
    double collective_overhead_ns; /* fixed cost of each collective:
                                handshake and DMA set-up */
    double scatter_update_ns; /* a scatter-add's cost per update window
                                (one row of C channels) beyond its vector
                                work: the updates run one after another
                                (roi_align's backward) */
    int xla_tile_search;     /* 1: each tiled loop takes the tile size its
                                cost model finds fastest; 0: the largest
                                that fits VMEM */
    int xla_group_conv;      /* how a grouped convolution is lowered: 0 the
                                fastest candidate (firmware/lower.c), 1 the
                                dense block-diagonal filter, 2 one product
                                per group, 3 depthwise on the vector unit */
    double vpu_madd_ops;     /* vector operations per multiply-add (a
                                depthwise convolution on the vector unit) */
    hbm_params hbm;
    ici_params ici;
    /* What tpu_params_set was given, so that the result does not depend on
     * the order of the --set options: one bit per key of the table (in
     * tpu_param_key order), and the HBM peak asked for, which is spread
     * over hbm.channels x hbm.bus_bytes whenever either is set.  Zero
     * after tpu_params_default. */
    uint64_t set_mask;
    double hbm_peak_gbs_set;
} tpu_params;

/* A pod slice as Cloud TPU names it. */
typedef struct {
    const char *name;  /* "v3-64" */
    int gen;
    int cores;
    int dim_x, dim_y;  /* chip torus */
    int full_pod;      /* wrap-around links exist on full pods */
} tpu_system;

/* Looks up a slice by name; NULL when unknown. */
const tpu_system *tpu_system_find(const char *name);
/* The table of slices, terminated by an entry with name == NULL. */
const tpu_system *tpu_systems(void);

/* What a chip-hour of a generation costs on demand, with the source and
 * its date (emu/params.c). */
typedef struct {
    int gen;
    double usd_per_chip_hour;
    const char *source;
} tpu_price;

/* The price of generation gen; NULL when none is listed. */
const tpu_price *tpu_chip_price(int gen);

/* The chip data of generation gen (2 or 3). */
void tpu_params_default(tpu_params *p, int gen);

/* One settable parameter: name, unit, source, accepted range. */
typedef struct {
    const char *key;     /* "hbm.bandwidth_gbs" */
    const char *unit;
    const char *source;  /* where the default comes from */
    double lo, hi;       /* tpu_params_set accepts lo <= value <= hi */
} tpu_param_info;

/* The i-th key accepted by tpu_params_set; NULL past the last. */
const tpu_param_info *tpu_param_key(size_t i);
/* The key accepted by tpu_params_set under that name; NULL when unknown. */
const tpu_param_info *tpu_param_find(const char *key);

/* The key's range as tpu_params_set's messages print it: "[1, 4096]"
 * (each bound the shortest text that reads back exactly). */
void tpu_param_range_text(const tpu_param_info *k, char *buf, size_t cap);

/* The plausible range of an unconfirmed ([U]) key: where the assumption
 * could lie given what is public (a figure it cannot exceed, the
 * neighbouring generation, what the compiler could do).  The step's
 * range over the unconfirmed assumptions moves one key at a time between
 * lo and hi (emu/range.h, docs/RANGES.md).  A 0/1 switch spans both
 * values. */
typedef struct {
    const char *key;
    double lo, hi;     /* for the generation asked */
    const char *why;   /* one line: why this range */
    const char *hold;  /* a key held at its default while this one moves
                          (hbm.channels keeps the published bandwidth), or
                          NULL */
} tpu_param_span;

/* The plausible range of key on generation gen (2 or 3): 1 with *out
 * filled for an unconfirmed key, 0 for any other (confirmed, derived,
 * unknown). */
int tpu_param_span_get(const char *key, int gen, tpu_param_span *out);

/* A key's source as `run --help` prints it: the table's source, and for
 * an unconfirmed key its plausible range on both generations with the
 * reason ("... range v2 [687e6, 700e6], v3 [800e6, 940e6]: ...").  The
 * text is cut to fit cap. */
void tpu_param_help_text(const tpu_param_info *k, char *buf, size_t cap);

/* Overrides one parameter from text ("hbm.bandwidth_gbs", "1200").
 * TPU_ERR_INPUT with a message for an unknown key, a bad value, or a key
 * that over-determines a quantity with one set before (hbm.bandwidth_gbs
 * with hbm.data_rate_gtps), naming both.
 *
 * The result does not depend on the order of the calls: a derived key
 * (hbm.bandwidth_gbs) is applied after the keys it is spread over
 * (hbm.channels, hbm.bus_bytes) whichever came first, so bandwidth 450
 * with channels 32 is 450 GB/s over 32 channels.  Cross-key rules are
 * checked once all are set, by tpu_params_check. */
tpu_status tpu_params_set(tpu_params *p, const char *key, const char *value,
                          tpu_error *err);
/* The rules between keys, checked once every override is in:
 * TPU_ERR_INPUT with a message naming every key involved, with its value,
 * "(default)" for the ones not set.  Also runs hbm_check_params. */
tpu_status tpu_params_check(const tpu_params *p, tpu_error *err);
/* The i-th rule between keys, one line of text for --help (the same table
 * tpu_params_check runs); NULL past the last. */
const char *tpu_param_rule(size_t i);
/* Reads a parameter's current value (for reports and docs). */
tpu_status tpu_params_get(const tpu_params *p, const char *key, double *out,
                          tpu_error *err);

/* Derived figures. */
double tpu_core_peak_flops(const tpu_params *p); /* bf16, per core */

#endif
