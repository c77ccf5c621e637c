/* The chip data.  Every hardware value tpuemu uses is here, once, with
 * where it comes from.  Tags:
 *   [C] read in the named source, [D] derived from [C] values,
 *   [U] unconfirmed: an assumption, stated, revisited when a source turns up.
 * Calibrated values say what measurement they were fitted to.
 */
#include "emu/params.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slices: the number counts cores; two cores per chip; chips on a 2D torus
 * (full pods: v2 16x16, v3 32x32; Cloud TPU docs).  Partial slices take a
 * rectangle of the pod, the longer side along x.  v2-2 and v3-2 are one
 * chip: not a Cloud TPU offering, but the smallest machine with the same
 * cores (what-if runs, and functional comparisons at a given replica
 * count). */
static const tpu_system systems[] = {
    {"v2-2", 2, 2, 1, 1, 0},       {"v3-2", 3, 2, 1, 1, 0},
    {"v2-8", 2, 8, 2, 2, 0},       {"v2-32", 2, 32, 4, 4, 0},
    {"v2-128", 2, 128, 8, 8, 0},   {"v2-256", 2, 256, 16, 8, 0},
    {"v2-512", 2, 512, 16, 16, 1}, {"v3-8", 3, 8, 2, 2, 0},
    {"v3-32", 3, 32, 4, 4, 0},     {"v3-64", 3, 64, 8, 4, 0},
    {"v3-128", 3, 128, 8, 8, 0},   {"v3-256", 3, 256, 16, 8, 0},
    {"v3-512", 3, 512, 16, 16, 0}, {"v3-1024", 3, 1024, 32, 16, 0},
    {"v3-2048", 3, 2048, 32, 32, 1}, {NULL, 0, 0, 0, 0, 0},
};

const tpu_system *tpu_systems(void) { return systems; }

/* On-demand price of a chip-hour, USD.  [C] Cloud TPU pricing
 * (cloud.google.com/tpu/pricing), single-device on-demand in us-central1
 * as listed 2019-2023: v2-8 $4.50 and v3-8 $8.00 per hour, each 4 chips.
 * [U] Pod slices were sold under commitment only, at no listed on-demand
 * rate: the device's rate per chip stands for every slice (`advise
 * --price` overrides it). */
static const tpu_price prices[] = {
    {2, 4.50 / 4, "Cloud TPU pricing, v2-8 on-demand us-central1 "
                  "(2019-2023): $4.50/h for 4 chips"},
    {3, 8.00 / 4, "Cloud TPU pricing, v3-8 on-demand us-central1 "
                  "(2019-2023): $8.00/h for 4 chips"},
};

const tpu_price *tpu_chip_price(int gen)
{
    for (size_t i = 0; i < sizeof prices / sizeof prices[0]; i++)
        if (prices[i].gen == gen)
            return &prices[i];
    return NULL;
}

const tpu_system *tpu_system_find(const char *name)
{
    for (const tpu_system *s = systems; name && s->name; s++)
        if (strcmp(s->name, name) == 0)
            return s;
    return NULL;
}

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

void tpu_params_default(tpu_params *p, int gen)
{
    memset(p, 0, sizeof *p);
    p->gen = gen == 2 ? 2 : 3;
    int v3 = p->gen == 3;
    /* [U] Jouppi et al., CACM 63(7) 2020; [D] consistent with the
     * published peaks: v2 2 cores x 1 MXU x 128^2 x 2 x 700 MHz = 45.9
     * TFLOP/s per chip, v3 2 x 2 x 128^2 x 2 x 940 MHz = 123 TFLOP/s. */
    p->clock_hz = v3 ? 940e6 : 700e6;
    p->cores_per_chip = 2;                 /* [C] cloud.google.com/tpu/docs */
    p->mxus_per_core = v3 ? 2 : 1;         /* [C] same; jax tpu_info.py */
    p->mxu.rows = 128;                     /* [C] Hot Chips 2020 */
    p->mxu.cols = 128;
    p->vpu_lanes = 128;                    /* [C] tpu_info NUM_LANES */
    p->vpu_sublanes = 8;                   /* [C] tpu_info NUM_SUBLANES */
    p->vpu_alus = 2;                       /* [C] Hot Chips 2020 */
    p->vmem_bytes = 16 * MIB;              /* [C] tpu_info; Hot Chips 2020 */
    p->lane_pad = 128;                     /* [C] Cloud TPU performance guide */
    p->sublane_pad = 8;                    /* [C] same */
    /* [U] cycles of issue/sync around one matrix instruction (push setup,
     * result pop hand-off to the vector unit).  Set by the VLIW bundle
     * issue; no public figure.  See docs/VALIDATION.md for sensitivity. */
    p->mxu_op_overhead_cycles = 0;
    p->vpu_op_overhead_cycles = 0;         /* [U] same, vector instructions */
    /* [U] XLA's SPMD ExchangeHalo builds the window's input by
     * concatenating the received halos with the local shard
     * (openxla/xla spmd/convolution_handler.cc); unless the concatenate is
     * fused into the convolution, that is one more HBM copy of the input
     * per partitioned convolution.  Compiler behaviour, not hardware:
     * kept as a switch to measure it (docs/VALIDATION.md). */
    p->xla_halo_copy = 1;
    /* [C] Cloud TPU "TensorFlow function performance notes"
     * (cloud.google.com/tpu/docs/tensorflow-performance-guide,
     * tf.nn.conv_n_d): XLA pads a convolution's activations and result in
     * batch and feature; when the module's most common convolution batch
     * is below 64, forward and input-gradient convolutions pad batch to a
     * multiple of 8 and feature to a multiple of 128, weight-gradient
     * convolutions the other way round.  The multiples are the (8, 128)
     * tile (sublane_pad, lane_pad).  The page is today's; that XLA did the
     * same in 2019-2020 is [U].  Switch kept for what-if studies. */
    p->xla_conv_pad = 1;
    p->xla_conv_batch_threshold = 64;      /* [C] same page */
    /* The page pads "the batch" of every small-batch convolution to 8.
     * That 3D convolutions (N, D, H, W, C) do too: a TPU v3 op profile of
     * a Conv3d with batch 12 and 1 channel marks "BATCH / FEATURE
     * dimensions are padded" (pytorch/xla issue 3180, 2021; for 2019,
     * [U]).  0 pads the features alone, to measure what the batch padding
     * costs (the 3D UNet's 4 examples per core stream as 8 rows with 1). */
    p->xla_conv_pad_batch = 1;
    /* [U] The small-batch layout pads each kernel tap's features to the
     * lanes; a convolution whose input has fewer features than this (an
     * image's 1-3 channels) folds its taps into K instead, as im2col
     * does.  Padding ResNet-50's 7x7 stem on 3 channels tap by tap costs
     * 24x its folded work and would make the published MLPerf v0.6 runs at
     * 32 and 16 examples per core (44.1, 25.3 ms) 65 and 34 ms; folded
     * they are 45 and 24 ms, so 3 features fold.  12 fold too: the public
     * MLPerf SSD and Mask R-CNN code rewrites that stem as a 4x4 conv on
     * 12 channels after a 2x2 space-to-depth "for TPU performance"
     * (conv0_space_to_depth), which would make the stem 8x slower if 12
     * features were padded tap by tap (16 taps of 128 against 147 folded
     * features).  16 is the smallest power of two above 12.  Plausible:
     * 4-32. */
    p->xla_conv_pad_min_features = 16;
    /* [U] A stored activation's (8, 128) tile takes its lanes from the
     * channels, the width or the batch, whichever pads least.  The batch
     * is a candidate because XLA's TPU layouts use it: the public MLPerf
     * v0.6 ResNet-50 code feeds images batch-minor (HWCN) above 8 examples
     * per core, so that the model's transpose back to NHWC is a layout
     * change, not a copy ("TPU double transpose optimization",
     * --transpose_input in resnet_main.py), and the Cloud TPU notes above
     * pad a weight-gradient convolution's batch to 128 (the batch on the
     * lanes).  For every activation, not only the image, it is [U]: at
     * 128 examples per core a 64-channel map is stored unpadded instead of
     * at 2x.  0 keeps the lanes to channels and width. */
    p->xla_batch_lanes = 1;
    /* [U] XLA SPMD's ReshardAsWindowedInput calls ExchangeHaloAndGetValidData
     * once per split dimension (openxla/xla spmd/spmd_partitioner.cc,
     * spmd_partitioner_util.cc): collective-permutes, a concatenate, a pad
     * and a (dynamic-)slice when the window needs them, and an
     * iota/compare/select that masks the window's padding and uneven
     * shards.  Whether the TPU backend fuses those into one loop fusion
     * per dimension (1) or runs each as its own HBM pass (0) is not
     * public.  1 is the cheaper reading (all are elementwise or
     * concatenate, which XLA's loop fusion accepts). */
    /* [C] openxla/xla spmd/convolution_handler.cc: a weight-gradient
     * convolution whose operands are split spatially computes a partial
     * kernel on each shard and all-reduces it over the partition group
     * right away (create_cross_partition_all_reduce), in the convolution's
     * output type; the data-parallel gradient all-reduce follows at the
     * end of the backward pass.  RetinaNet's heads, shared across five
     * levels, all-reduce five partial kernels per conv.  Whether the TPU
     * backend combined them in 2019 is [U]; 0 leaves the whole reduction
     * to the final all-reduce. */
    p->xla_dw_allreduce = 1;
    /* [U] Whether the TPU backend fused batchnorm's statistics (a reduce
     * over batch and space) into the producing convolution's output
     * fusion, or ran them as their own reduction fusion reading the
     * activation once more.  XLA's TPU profiles name fusions
     * ("convolution fusion", "loop fusion") but not what each holds, so
     * how much is fused is a modelling choice.  1 is the cheaper reading;
     * 0 measures the other. */
    p->xla_bn_stats_fused = 1;
    /* [U] Whether batchnorm's normalise (scale, shift and a following
     * relu) runs as its own loop fusion, one HBM round trip of the
     * activation (0, the documented default), or is fused into what reads
     * it: the next convolution's operand or a residual add's pass (1).
     * XLA fuses elementwise work into the producing or consuming
     * convolution (XLA operation semantics, TPU profiler op names); how
     * much is [U].  1: the TF-on-TPU performance notes say a matrix
     * product fuses the elementwise work on its input and output
     * (tf.matmul), and the published ResNet-50 runs at 128 and 64
     * examples per core (MLPerf v0.6) are 10 and 6% from the fused step,
     * 24 and 12% from the unfused one; 0 is the what-if. */
    p->xla_bn_apply_fused = 1;
    p->xla_halo_fused = 1;
    /* [C] openxla/xla spmd/convolution_handler.cc: the weight-gradient
     * convolution has both operands split spatially and is partitioned by
     * PartitionConvolutionWithSpatialDimensionHaloExchangeOnLHS (the
     * default, conv_halo_exchange_always_on_lhs), which exchanges the
     * activation's halo again (collective-permute + concatenate per
     * dimension, no mask) rather than reusing the forward buffer. */
    p->xla_dw_halo = 1;
    /* [C] openxla/xla HloRematerialization (hlo_rematerialization.cc):
     * given a memory limit, XLA recomputes values instead of keeping them
     * live ("Can't reduce memory use below ... by rematerialization" is its
     * message when it cannot).  That the TPU compiler runs it with the
     * core's HBM as the limit is [U] (the TPU backend is closed); tpuemu
     * applies the cheapest case only: an activation (relu/sigmoid) whose
     * input is kept anyway is recomputed by one vector pass. */
    p->xla_remat = 1;
    /* [C] Kaufman et al., "A Learned Performance Model for Tensor
     * Processing Units" (MLSys 2021): the production XLA TPU compiler
     * selects tile sizes with an analytical performance model.  Its
     * terms are [U]; tpuemu's lowering prices candidate tiles with the
     * engine's own unit costs (firmware/lower.c). */
    p->xla_tile_search = 1;
    /* [U] No public figure for what starting a kernel (an XLA fusion: one
     * layer's pass here) costs on the TPU: program-counter jump, DMA
     * descriptors, pipeline fill before its first instruction; nor for a
     * collective's handshake and DMA set-up beyond the link model.  0 is
     * the floor; docs/VALIDATION.md fits both with `validate --fit` and
     * judges each by leaving a family out. */
    p->kernel_overhead_ns = 0;
    p->collective_overhead_ns = 0;
    /* [U] A scatter-add (the gradient of a gather) may update the same row
     * twice, so the TPU applies its updates in order, one update window
     * (a row of C channels) at a time, each a read-modify-write of HBM:
     * XLA's ScatterExpander turns a scatter into a while loop with one
     * trip per update (openxla/xla service/scatter_expander.cc; issue
     * openxla/xla#12982 shows it on TPU), and JAX's scatter on TPU v2/v3
     * costs 15-22 ns per scalar update with today's compiler (pytorch/xla
     * issue #8720).  The value is fitted on the public set
     * (docs/VALIDATION.md, `validate --fit`: 300 ns, the rows alone
     * 230-320 ns): only Mask R-CNN's roi_align scatters, so only its rows
     * identify it; range 15-1000 ns, from today's per-element cost up to
     * a loop trip of a microsecond. */
    p->scatter_update_ns = 300;
    /* [U] How the TPU compiler lowers a grouped convolution
     * (feature_group_count > 1) is not public.  [C] XLA's
     * ConvolutionGroupConverter (openxla/xla convolution_group_converter.cc;
     * tensorflow/compiler/xla/service in 2019) either expands the filter
     * into a dense block-diagonal one (zeros outside the groups: one
     * ordinary convolution, G x the MACs), slices the operands into one
     * convolution per group and concatenates the outputs, or, when the
     * backend handles depthwise convolutions itself, leaves them alone.
     * tpuemu prices the candidates with the engine and keeps the fastest
     * (0); 1, 2, 3 force one for what-if studies (docs/FIRMWARE.md). */
    p->xla_group_conv = 0;
    /* [U] The v2/v3 vector unit's instruction set is not public; a
     * multiply-add is counted as a multiply and an add (no fused
     * multiply-add assumed). */
    p->vpu_madd_ops = 2;

    /* HBM2, per core (half a chip); model in hbm/hbm.h, docs/HBM.md.
     * [C] capacity: v2 16 GiB, v3 32 GiB per chip (Cloud TPU docs).
     * [C] bandwidth: 700 / 900 GB/s per chip (Norrie et al., IEEE Micro
     * 2021).  Organisation and timings follow JEDEC JESD235A HBM2 as two
     * published HBM2 configurations encode it:
     *   [DS3] DRAMsim3 configs/HBM2_8Gb_x128.ini (umd-memsys/DRAMsim3,
     *         Li et al., IEEE CAL 2020): tCK 1 ns, 128-bit channel, BL4,
     *         4 bank groups x 4 banks, 64 columns, CL 14, tRCD 14, tRP 14,
     *         tRAS 34, tRFC 260, tREFI 3900, tRRD_S 4, tFAW 30 (cycles of
     *         1 ns), trans_queue_size 16, OPEN_PAGE.
     *   [RAM] Ramulator src/HBM.h (CMU-SAFARI/ramulator), HBM 1 Gbps bin:
     *         tCK 2 ns, nCL = nRCD = nRP = 7 (14 ns), nRAS 17 (34 ns),
     *         nREFI 1950 (3.9 us), 16 banks, 64 columns of 128 bits.
     * tREFI 3.9 us at normal temperature; the HBM2 part asks for 0.5x or
     * 0.25x when hot (Intel HBM2 FPGA IP user guide 683189, "DRAM Refresh
     * Timing": TEMP[2:0] scales tREFI) -- hbm.t_refi_ns models that.  */
    p->hbm.capacity_bytes = (v3 ? 16 : 8) * GIB;
    /* [U] two stacks x 8 legacy-mode channels per core (a chip's 4 stacks
     * split between its two cores). */
    p->hbm.channels = 16;
    p->hbm.banks = 16;                 /* [C] DS3, RAM: 4 groups x 4 */
    p->hbm.bus_bytes = 16;             /* [C] JESD235A: 128-bit channel */
    p->hbm.burst_beats = 4;            /* [C] DS3 BL4: 64 B per access */
    p->hbm.row_bytes = 1024;           /* [C] DS3, RAM: 64 cols x 128 bit */
    /* [U] address map: 256 B (four bursts) per channel before moving on,
     * a common HBM controller default (small enough to spread a tile
     * over all channels, large enough to keep a row busy). */
    p->hbm.interleave_bytes = 256;
    p->hbm.t_rcd_ns = 14;              /* [C] DS3 tRCDRD; RAM nRCD */
    p->hbm.t_rp_ns = 14;               /* [C] DS3 tRP; RAM nRP */
    p->hbm.t_cl_ns = 14;               /* [C] DS3 CL; RAM nCL */
    p->hbm.t_ras_ns = 34;              /* [C] DS3 tRAS; RAM nRAS */
    p->hbm.t_rfc_ns = 260;             /* [C] DS3 tRFC (8 Gb die) */
    p->hbm.t_refi_ns = 3900;           /* [C] DS3 tREFI; RAM nREFI */
    p->hbm.t_rrd_ns = 4;               /* [C] DS3 tRRD_S */
    p->hbm.t_faw_ns = 30;              /* [C] DS3 tFAW */
    /* [U] rows the controller opens ahead of the data (bank-level
     * parallelism); DS3's 16-entry transaction queue. */
    p->hbm.queue_depth = 16;
    /* [D] pin rate set so the peak equals the published per-core
     * bandwidth: 1.37 (v2) / 1.76 (v3) GT/s, inside HBM2's 2.0 GT/s. */
    p->hbm.data_rate_gtps = 1.0;
    hbm_set_peak_gbs(&p->hbm, v3 ? 450.0 : 350.0);

    /* ICI.  [U] link bandwidth one way: v2 496 Gbit/s = 62 GB/s, v3
     * 656 Gbit/s = 82 GB/s (CACM 2020; the scaling book says 100 GB/s for
     * v3).  [U] hop latency 1 us.  [U] on-chip core-to-core link at twice
     * a link's speed (Norrie et al. 2021 mention internal links at 2x).
     * [U] partial slices have no wrap-around links (they are a rectangle
     * cut from the pod's torus); full pods wrap. */
    p->ici.link_gbs = v3 ? 82.0 : 62.0;
    p->ici.hop_latency_s = 1.0e-6;
    p->ici.onchip_gbs = 2.0 * p->ici.link_gbs;
    p->ici.onchip_latency_s = 0.5e-6;
    p->ici.wrap = 0;
}

double tpu_core_peak_flops(const tpu_params *p)
{
    return 2.0 * p->mxus_per_core * p->mxu.rows * p->mxu.cols * p->clock_hz;
}

/* ---- the --set table ---------------------------------------------------- */

typedef enum { PK_DOUBLE, PK_INT, PK_HBM_PEAK, PK_GIB } pkind;

typedef struct {
    tpu_param_info info; /* key, unit, source, accepted range */
    pkind kind;
    size_t off;
} pentry;

#define D(key, field, unit, lo, hi, src) \
    {{key, unit, src, lo, hi}, PK_DOUBLE, offsetof(tpu_params, field)}
#define I(key, field, unit, lo, hi, src) \
    {{key, unit, src, lo, hi}, PK_INT, offsetof(tpu_params, field)}

static const pentry table[] = {
    D("clock_hz", clock_hz, "Hz", 1e6, 1e11, "[U] CACM 2020"),
    I("mxus_per_core", mxus_per_core, "", 1, 64, "[C] Cloud TPU docs"),
    I("mxu.rows", mxu.rows, "PEs", 1, 4096, "[C] Hot Chips 2020"),
    I("mxu.cols", mxu.cols, "PEs", 1, 4096, "[C] Hot Chips 2020"),
    I("vpu.lanes", vpu_lanes, "", 1, 65536, "[C] tpu_info"),
    I("vpu.sublanes", vpu_sublanes, "", 1, 1024, "[C] tpu_info"),
    I("vpu.alus", vpu_alus, "", 1, 64, "[C] Hot Chips 2020"),
    D("vmem_bytes", vmem_bytes, "B", 65536, 1e12, "[C] tpu_info"),
    I("layout.lane_pad", lane_pad, "", 1, 4096, "[C] TPU performance guide"),
    I("layout.sublane_pad", sublane_pad, "", 1, 4096, "[C] same"),
    D("mxu.op_overhead_cycles", mxu_op_overhead_cycles, "cycles", 0, 1e6,
      "[U] no public figure"),
    D("vpu.op_overhead_cycles", vpu_op_overhead_cycles, "cycles", 0, 1e6,
      "[U] no public figure"),
    {{"hbm.bandwidth_gbs", "GB/s",
      "per core: 350 v2 / 450 v3, half the chip's 700/900 [C] IEEE Micro "
      "2021. The peak data rate only: the row timings stay, so above about "
      "2.2 TB/s the activate rate caps what a stream reaches (a row, "
      "hbm.row_bytes, per channel every max(hbm.t_rrd_ns, hbm.t_faw_ns/4), "
      "times hbm.channels: 16 x 1 KiB per 7.5 ns, 2.0 TB/s after refresh)",
      1, 1e6},
     PK_HBM_PEAK, 0},
    {{"hbm.capacity_gib", "GiB", "[C] Cloud TPU docs", 1.0 / 1024, 1e6},
     PK_GIB, offsetof(tpu_params, hbm.capacity_bytes)},
    I("hbm.channels", hbm.channels, "", 1, 1024, "[U] 2 stacks x 8"),
    I("hbm.banks", hbm.banks, "", 1, 256, "[C] DRAMsim3/Ramulator HBM2"),
    I("hbm.bus_bytes", hbm.bus_bytes, "B", 1, 1024, "[C] JESD235 128-bit"),
    D("hbm.data_rate_gtps", hbm.data_rate_gtps, "GT/s", 0.01, 100,
      "[D] from the published bandwidth"),
    I("hbm.burst_beats", hbm.burst_beats, "", 1, 64,
      "[C] DRAMsim3 HBM2 BL4"),
    I("hbm.row_bytes", hbm.row_bytes, "B", 32, 1 << 20,
      "[C] DRAMsim3/Ramulator HBM2: 1 KiB"),
    I("hbm.interleave_bytes", hbm.interleave_bytes, "B", 32, 1 << 24,
      "[U] address map"),
    D("hbm.t_rcd_ns", hbm.t_rcd_ns, "ns", 0, 1000,
      "[C] DRAMsim3/Ramulator HBM2"),
    D("hbm.t_rp_ns", hbm.t_rp_ns, "ns", 0, 1000,
      "[C] DRAMsim3/Ramulator HBM2"),
    D("hbm.t_cl_ns", hbm.t_cl_ns, "ns", 0, 1000,
      "[C] DRAMsim3/Ramulator HBM2"),
    D("hbm.t_ras_ns", hbm.t_ras_ns, "ns", 0, 1000,
      "[C] DRAMsim3/Ramulator HBM2"),
    D("hbm.t_rfc_ns", hbm.t_rfc_ns, "ns", 0, 100000,
      "[C] DRAMsim3 HBM2 8 Gb"),
    D("hbm.t_refi_ns", hbm.t_refi_ns, "ns", 100, 1e7,
      "[C] DRAMsim3/Ramulator HBM2"),
    D("hbm.t_rrd_ns", hbm.t_rrd_ns, "ns", 0, 1000, "[C] DRAMsim3 HBM2"),
    D("hbm.t_faw_ns", hbm.t_faw_ns, "ns", 0, 10000, "[C] DRAMsim3 HBM2"),
    I("hbm.queue_depth", hbm.queue_depth, "visits", 1, 4096,
      "[U] DRAMsim3 HBM2 queue"),
    D("ici.link_gbs", ici.link_gbs, "GB/s", 0.001, 1e6, "[U] CACM 2020"),
    D("ici.hop_latency_s", ici.hop_latency_s, "s", 0, 1, "[U]"),
    D("ici.onchip_gbs", ici.onchip_gbs, "GB/s", 0.001, 1e6,
      "[U] IEEE Micro 2021: 2x a link (the default link: does not follow "
      "ici.link_gbs)"),
    D("ici.onchip_latency_s", ici.onchip_latency_s, "s", 0, 1, "[U]"),
    I("xla.halo_copy", xla_halo_copy, "0/1", 0, 1,
      "[U] XLA ExchangeHalo concatenate"),
    I("xla.conv_pad", xla_conv_pad, "0/1", 0, 1,
      "[C] Cloud TPU TF performance notes, tf.nn.conv_n_d"),
    I("xla.conv_batch_threshold", xla_conv_batch_threshold, "examples", 1,
      1 << 30, "[C] same: 64"),
    I("xla.conv_pad_batch", xla_conv_pad_batch, "0/1", 0, 1,
      "[C] same, batch to 8; [U] for 3D layouts"),
    I("xla.conv_pad_min_features", xla_conv_pad_min_features, "features", 1,
      1 << 20, "[U] thinner inputs fold their taps (ResNet-50 stem, "
      "space-to-depth stems)"),
    I("xla.batch_lanes", xla_batch_lanes, "0/1", 0, 1,
      "[U] stored activations may take the batch as their lanes (MLPerf "
      "ResNet-50's batch-minor images)"),
    I("xla.halo_fused", xla_halo_fused, "0/1", 0, 1,
      "[U] SPMD halo ops fused per dimension"),
    I("xla.dw_halo", xla_dw_halo, "0/1", 0, 1,
      "[C] XLA HaloExchangeOnLHS for weight gradients"),
    I("xla.bn_stats_fused", xla_bn_stats_fused, "0/1", 0, 1,
      "[U] batchnorm statistics in the conv epilogue"),
    I("xla.bn_apply_fused", xla_bn_apply_fused, "0/1", 0, 1,
      "[U] batchnorm normalise fused into its consumers"),
    I("xla.dw_allreduce", xla_dw_allreduce, "0/1", 0, 1,
      "[C] XLA SPMD all-reduces each partial weight gradient"),
    I("xla.remat", xla_remat, "0/1", 0, 1,
      "[C] XLA HloRematerialization; [U] on TPU"),
    D("xla.kernel_overhead_ns", kernel_overhead_ns, "ns", 0, 1e6,
      "[U] no public figure: starting one layer's pass"),
    D("xla.collective_overhead_ns", collective_overhead_ns, "ns", 0, 1e6,
      "[U] no public figure: a collective's handshake"),
    D("xla.scatter_update_ns", scatter_update_ns, "ns", 0, 1e6,
      "[U] a scatter-add's updates in order, per row (fitted)"),
    I("xla.tile_search", xla_tile_search, "0/1", 0, 1,
      "[C] XLA TPU picks tiles by cost model (MLSys 2021)"),
    I("xla.group_conv", xla_group_conv, "0-3", 0, 3,
      "[U] grouped conv: 0 fastest, 1 dense, 2 per group, 3 vector"),
    D("vpu.madd_ops", vpu_madd_ops, "ops", 0.5, 16,
      "[U] vector ops per multiply-add (depthwise on the VPU)"),
    I("ici.wrap", ici.wrap, "0/1", 0, 1, "[U] partial slices: no wrap"),
};
#define NTABLE (sizeof table / sizeof table[0])
_Static_assert(NTABLE <= 64, "tpu_params.set_mask holds one bit per key");

const tpu_param_info *tpu_param_key(size_t i)
{
    return i < NTABLE ? &table[i].info : NULL;
}

/* The shortest %g text that reads back as v: a bound shown exactly
 * ("0.0009765625", where %g says "0.000976562"). */
static void fmt_exact(char *buf, size_t cap, double v)
{
    /* whole numbers below a million in full: 900, not 9e+02 */
    if (v == floor(v) && fabs(v) < 1e6) {
        snprintf(buf, cap, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

void tpu_param_range_text(const tpu_param_info *k, char *buf, size_t cap)
{
    char lo[32], hi[32];
    fmt_exact(lo, sizeof lo, k->lo);
    fmt_exact(hi, sizeof hi, k->hi);
    snprintf(buf, cap, "[%s, %s]", lo, hi);
}

static size_t key_index(const char *key)
{
    size_t i = 0;
    while (i < NTABLE && strcmp(table[i].info.key, key) != 0)
        i++;
    return i;
}

static const pentry *find(const char *key)
{
    size_t i = key_index(key);
    return i < NTABLE ? &table[i] : NULL;
}

const tpu_param_info *tpu_param_find(const char *key)
{
    const pentry *e = key ? find(key) : NULL;
    return e ? &e->info : NULL;
}

static int is_set(const tpu_params *p, const char *key)
{
    size_t i = key_index(key);
    return i < NTABLE && (p->set_mask >> i & 1u);
}

/* ---- the plausible ranges of the unconfirmed keys ------------------------
 * One row per [U] key of the table (test_range checks both ways): the
 * range on v2 and on v3, and why.  `run` times the step at each end, one
 * key at a time (emu/range.c, docs/RANGES.md). */

typedef struct {
    const char *key;
    double lo2, hi2, lo3, hi3;
    const char *why;
    const char *hold;
} pspan;

static const pspan spans[] = {
    {"clock_hz", 687e6, 700e6, 800e6, 940e6,
     "no faster than CACM 2020's 700/940 MHz (its published peaks); Cloud "
     "TPU's 180 and 420 TFLOP/s per 4-chip board read as 687/800 MHz",
     NULL},
    {"mxu.op_overhead_cycles", 0, 32, 0, 32,
     "none (issue fully pipelined) up to a quarter of the 128-cycle weight "
     "load a product overlaps",
     NULL},
    {"vpu.op_overhead_cycles", 0, 32, 0, 32,
     "the matrix instructions' bound, for a vector instruction's issue",
     NULL},
    {"hbm.channels", 16, 32, 16, 32,
     "a core's 2 stacks in legacy (8 channels each) or pseudo-channel mode "
     "(16, JESD235A); the peak held at the published bandwidth",
     "hbm.bandwidth_gbs"},
    {"hbm.interleave_bytes", 64, 1024, 64, 1024,
     "one burst (64 B) to one row (1 KiB): the address map's own bounds",
     NULL},
    {"hbm.queue_depth", 8, 32, 8, 32,
     "half DRAMsim3's 16-entry queue up to Ramulator's 32", NULL},
    {"ici.link_gbs", 49.6, 62, 65.6, 100,
     "80% of CACM 2020's 496/656 Gbit/s (headers, flow control) up to the "
     "raw rate; v3 up to the scaling book's 100 GB/s",
     NULL},
    {"ici.hop_latency_s", 0.1e-6, 2e-6, 0.1e-6, 2e-6,
     "a switch hop of 2019 HPC networks (0.1 us) up to 2 us of router and "
     "synchronisation per hop",
     NULL},
    {"ici.onchip_gbs", 62, 248, 82, 328,
     "one link's speed up to 4x (Norrie et al. 2021 say 2x)", NULL},
    {"ici.onchip_latency_s", 0.1e-6, 1e-6, 0.1e-6, 1e-6,
     "no more than one off-chip hop (1 us)", NULL},
    {"xla.halo_copy", 0, 1, 0, 1,
     "the halo concatenate fused into the convolution (0) or copied (1)",
     NULL},
    {"xla.conv_pad_batch", 0, 1, 0, 1,
     "a 3D layout pads the features alone (0) or the batch too (1)", NULL},
    {"xla.batch_lanes", 0, 1, 0, 1,
     "lanes from the channels or width only (0) or the batch too (1)",
     NULL},
    {"xla.conv_pad_min_features", 4, 32, 4, 32,
     "half the sublane tile (an RGBA image folds) up to 32 features (a "
     "layer that 32-feature tiles would pad 4x to the lanes)",
     NULL},
    {"xla.kernel_overhead_ns", 0, 5000, 0, 5000,
     "none up to 5 us, a host-launched GPU kernel's cost (a TPU runs its "
     "whole step as one program, so less is likelier)",
     NULL},
    {"xla.collective_overhead_ns", 0, 20000, 0, 20000,
     "none up to 20 us, an MPI small-message all-reduce on a 2019 HPC "
     "network",
     NULL},
    {"xla.scatter_update_ns", 15, 1000, 15, 1000,
     "today's 15-22 ns per element of a JAX scatter on TPU v2/v3 up to a "
     "while-loop trip of 1 us per update (ScatterExpander)",
     NULL},
    {"xla.halo_fused", 0, 1, 0, 1,
     "each dimension's halo ops as separate passes (0) or one fusion (1)",
     NULL},
    {"xla.bn_stats_fused", 0, 1, 0, 1,
     "batchnorm statistics as their own pass (0) or in the conv epilogue "
     "(1)",
     NULL},
    {"xla.bn_apply_fused", 0, 1, 0, 1,
     "batchnorm normalise as its own pass (0) or in its consumers (1)",
     NULL},
    {"xla.remat", 0, 1, 0, 1,
     "whether the TPU compiler recomputes activations to fit; only a step "
     "that fits by recomputing can move, and without it it does not fit",
     NULL},
    {"xla.group_conv", 0, 1, 0, 1,
     "the fastest of XLA's lowerings (0) or the dense block-diagonal "
     "filter ConvolutionGroupConverter builds (1)",
     NULL},
    {"vpu.madd_ops", 1, 2, 1, 2,
     "a fused multiply-add (1) or a multiply and an add (2)", NULL},
    {"ici.wrap", 0, 1, 0, 1,
     "a partial slice cut from the pod's torus (0) or wired as its own "
     "torus (1)",
     NULL},
};
#define NSPANS (sizeof spans / sizeof spans[0])

int tpu_param_span_get(const char *key, int gen, tpu_param_span *out)
{
    for (size_t i = 0; key && i < NSPANS; i++) {
        const pspan *s = &spans[i];
        if (strcmp(s->key, key) != 0)
            continue;
        if (out) {
            out->key = s->key;
            out->lo = gen == 2 ? s->lo2 : s->lo3;
            out->hi = gen == 2 ? s->hi2 : s->hi3;
            out->why = s->why;
            out->hold = s->hold;
        }
        return 1;
    }
    return 0;
}

void tpu_param_help_text(const tpu_param_info *k, char *buf, size_t cap)
{
    tpu_param_span s2, s3;
    if (!tpu_param_span_get(k->key, 2, &s2) ||
        !tpu_param_span_get(k->key, 3, &s3)) {
        snprintf(buf, cap, "%s", k->source);
        return;
    }
    char a[32], b[32], r[160];
    fmt_exact(a, sizeof a, s3.lo);
    fmt_exact(b, sizeof b, s3.hi);
    if (s2.lo == s3.lo && s2.hi == s3.hi) {
        snprintf(r, sizeof r, "[%s, %s]", a, b);
    } else {
        char c[32], d[32];
        fmt_exact(c, sizeof c, s2.lo);
        fmt_exact(d, sizeof d, s2.hi);
        snprintf(r, sizeof r, "v2 [%s, %s], v3 [%s, %s]", c, d, a, b);
    }
    snprintf(buf, cap, "%s; range %s: %s", k->source, r, s3.why);
}

/* Keys whose value is spread over other keys' current values.  Applying
 * them in command-line order would make `--set hbm.bandwidth_gbs=450
 * --set hbm.channels=32` twice as fast as the other order, so a derived
 * key is applied after the keys it is spread over, whatever the
 * order, and refused together with the key it fixes (both would set the
 * same quantity).  hbm.bandwidth_gbs is the only setter that reads other
 * keys: ici.onchip_gbs's default is 2x ici.link_gbs, but setting either
 * leaves the other alone. */
typedef struct {
    const char *key;      /* the derived key */
    const char *over[2];  /* applied after these */
    const char *fixes;    /* what it sets: not with it */
    const char *formula;  /* the quantity both would determine */
} pderived;

static const pderived derived[] = {
    /* [D] hbm_peak_bps: the peak is channels x bus width x pin rate */
    {"hbm.bandwidth_gbs",
     {"hbm.channels", "hbm.bus_bytes"},
     "hbm.data_rate_gtps",
     "hbm.bandwidth_gbs = hbm.channels x hbm.bus_bytes x hbm.data_rate_gtps"},
};
#define NDERIVED (sizeof derived / sizeof derived[0])

/* The derived keys' values from the set ones, after every set. */
static void rederive(tpu_params *p)
{
    if (is_set(p, "hbm.bandwidth_gbs"))
        hbm_set_peak_gbs(&p->hbm, p->hbm_peak_gbs_set);
}

/* A parameter's current value as text, "(default)" when --set did not
 * give it (error messages name every key a rule involves). */
static void key_value(const tpu_params *p, const char *key, char *buf,
                      size_t cap)
{
    double v = 0;
    const pentry *e = find(key);
    if (e && e->kind == PK_HBM_PEAK && is_set(p, key))
        v = p->hbm_peak_gbs_set;
    else
        tpu_params_get(p, key, &v, NULL);
    char num[32];
    fmt_exact(num, sizeof num, v);
    snprintf(buf, cap, "%s=%s%s", key, num, is_set(p, key) ? "" : " (default)");
}

/* Refuses setting key when it and a key already set over-determine one
 * quantity. */
static tpu_status check_conflict(const tpu_params *p, const char *key,
                                 const char *value, tpu_error *err)
{
    for (size_t i = 0; i < NDERIVED; i++) {
        const pderived *d = &derived[i];
        const char *other = strcmp(key, d->key) == 0     ? d->fixes
                            : strcmp(key, d->fixes) == 0 ? d->key
                                                         : NULL;
        if (!other || !is_set(p, other))
            continue;
        char ov[96];
        key_value(p, other, ov, sizeof ov);
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--set %s=%s and --set %s: both fix one quantity "
                        "(%s); set only one of %s and %s",
                        key, value, ov, d->formula, d->key, d->fixes);
    }
    return TPU_OK;
}

tpu_status tpu_params_set(tpu_params *p, const char *key, const char *value,
                          tpu_error *err)
{
    const pentry *e = find(key);
    if (!e)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--set %s: unknown parameter (see tpuemu run --help "
                        "for the list)", key);
    /* Plain decimal or scientific notation: strtod alone would also take
     * hex ("0x10"), "inf", "nan" and leading blanks. */
    int plain = *value != 0;
    for (const char *q = value; *q; q++)
        if (!strchr("0123456789+-.eE", *q))
            plain = 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(value, &end);
    int erange = errno == ERANGE;
    if (!plain || *end || (errno && !erange) || (!erange && !isfinite(v)))
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--set %s=%s: expected a decimal number", key, value);
    char range[80];
    tpu_param_range_text(&e->info, range, sizeof range);
    /* A number beyond a double: out of range like any other, as
     * --tolerance takes 1e-400 as 0.  A value that underflows towards 0
     * is taken as such when 0 (or the tiny value) is in range and the key
     * is not an integer. */
    if (erange && !isfinite(v))
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--set %s=%s: out of range %s (too large for a "
                        "double)", key, value, range);
    if (erange && e->kind == PK_INT)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--set %s=%s: expected an integer", key, value);
    if (erange && v < e->info.lo)
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--set %s=%s: out of range %s (too close to 0 for a "
                        "double: it reads as %g)", key, value, range, v);
    if (v < e->info.lo || v > e->info.hi)
        return tpu_fail(err, TPU_ERR_INPUT, "--set %s=%s: out of range %s",
                        key, value, range);
    if (v == 0)
        v = 0; /* -0 and an underflow to -0 are 0 */
    if (e->kind == PK_INT && v != floor(v))
        return tpu_fail(err, TPU_ERR_INPUT,
                        "--set %s=%s: expected an integer", key, value);
    tpu_status rc = check_conflict(p, key, value, err);
    if (rc)
        return rc;
    char *base = (char *)p;
    switch (e->kind) {
    case PK_DOUBLE:
        *(double *)(base + e->off) = v;
        break;
    case PK_INT:
        *(int *)(base + e->off) = (int)v;
        break;
    case PK_GIB:
        *(double *)(base + e->off) = v * GIB;
        break;
    case PK_HBM_PEAK:
        p->hbm_peak_gbs_set = v;
        break;
    }
    p->set_mask |= (uint64_t)1 << (size_t)(e - table);
    rederive(p);
    return TPU_OK;
}

tpu_status tpu_params_get(const tpu_params *p, const char *key, double *out,
                          tpu_error *err)
{
    const pentry *e = find(key);
    if (!e)
        return tpu_fail(err, TPU_ERR_INPUT, "unknown parameter %s", key);
    const char *base = (const char *)p;
    switch (e->kind) {
    case PK_DOUBLE:
        *out = *(const double *)(base + e->off);
        break;
    case PK_INT:
        *out = *(const int *)(base + e->off);
        break;
    case PK_GIB:
        *out = *(const double *)(base + e->off) / GIB;
        break;
    case PK_HBM_PEAK:
        *out = hbm_peak_bps(&p->hbm) / 1e9;
        break;
    }
    return TPU_OK;
}

/* ---- rules between keys -------------------------------------------------
 * What the HBM model needs of its parameters together (hbm/hbm.h: the
 * address map takes channel, bank and column from address bits; a burst
 * stays in one interleave unit, a unit in one row).  Each rule's --help
 * line and its check sit side by side; hbm_check_params, which hbm_new
 * relies on, runs after them as the model's own guard.  The messages name
 * every key involved, so a rule broken by keys the user set does not
 * blame one left at its default. */

static int is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

static const char *const pow2_keys[] = {
    "hbm.channels",  "hbm.banks",     "hbm.bus_bytes",
    "hbm.burst_beats", "hbm.row_bytes", "hbm.interleave_bytes"};

static int rule_pow2(const tpu_params *p, char *msg, size_t cap)
{
    for (size_t i = 0; i < sizeof pow2_keys / sizeof pow2_keys[0]; i++) {
        double v = 0;
        tpu_params_get(p, pow2_keys[i], &v, NULL);
        if (!is_pow2((int)v)) {
            char kv[96];
            key_value(p, pow2_keys[i], kv, sizeof kv);
            snprintf(msg, cap,
                     "%s: not a power of two; the HBM address map takes it "
                     "from address bits", kv);
            return 1;
        }
    }
    return 0;
}

static int rule_burst(const tpu_params *p, char *msg, size_t cap)
{
    const hbm_params *h = &p->hbm;
    double burst = (double)h->bus_bytes * h->burst_beats;
    if (burst <= h->interleave_bytes)
        return 0;
    char a[96], b[96], c[96];
    key_value(p, "hbm.bus_bytes", a, sizeof a);
    key_value(p, "hbm.burst_beats", b, sizeof b);
    key_value(p, "hbm.interleave_bytes", c, sizeof c);
    snprintf(msg, cap,
             "one burst, %s x %s = %.0f B, is larger than %s: a burst stays "
             "in one channel's interleave unit", a, b, burst, c);
    return 1;
}

static int rule_row(const tpu_params *p, char *msg, size_t cap)
{
    if (p->hbm.interleave_bytes <= p->hbm.row_bytes)
        return 0;
    char a[96], b[96];
    key_value(p, "hbm.interleave_bytes", a, sizeof a);
    key_value(p, "hbm.row_bytes", b, sizeof b);
    snprintf(msg, cap,
             "%s is larger than %s: an interleave unit stays in one bank "
             "row", a, b);
    return 1;
}

static int rule_capacity(const tpu_params *p, char *msg, size_t cap)
{
    const hbm_params *h = &p->hbm;
    double rows = (double)h->row_bytes * h->channels * h->banks;
    if (h->capacity_bytes >= rows)
        return 0;
    char a[96], b[96], c[96], d[96];
    key_value(p, "hbm.row_bytes", a, sizeof a);
    key_value(p, "hbm.channels", b, sizeof b);
    key_value(p, "hbm.banks", c, sizeof c);
    key_value(p, "hbm.capacity_gib", d, sizeof d);
    snprintf(msg, cap,
             "one row per bank, %s x %s x %s = %.6g GiB, is more than %s",
             a, b, c, rows / GIB, d);
    return 1;
}

static int rule_refresh(const tpu_params *p, char *msg, size_t cap)
{
    if (p->hbm.t_rfc_ns < p->hbm.t_refi_ns)
        return 0;
    char a[96], b[96];
    key_value(p, "hbm.t_rfc_ns", a, sizeof a);
    key_value(p, "hbm.t_refi_ns", b, sizeof b);
    snprintf(msg, cap,
             "%s is not below %s: a refresh ends before the next is due",
             a, b);
    return 1;
}

typedef struct {
    const char *help; /* one line of tpuemu run --help */
    int (*broken)(const tpu_params *p, char *msg, size_t cap);
} prule;

static const prule rules[] = {
    {"hbm.channels, banks, bus_bytes, burst_beats, row_bytes and "
     "interleave_bytes are powers of two", rule_pow2},
    {"hbm.bus_bytes x hbm.burst_beats (one burst) <= hbm.interleave_bytes",
     rule_burst},
    {"hbm.interleave_bytes <= hbm.row_bytes", rule_row},
    {"hbm.row_bytes x hbm.channels x hbm.banks <= hbm.capacity_gib (a row "
     "per bank)", rule_capacity},
    {"hbm.t_rfc_ns < hbm.t_refi_ns", rule_refresh},
};
#define NRULES (sizeof rules / sizeof rules[0])

tpu_status tpu_params_check(const tpu_params *p, tpu_error *err)
{
    char msg[sizeof err->msg];
    for (size_t i = 0; i < NRULES; i++)
        if (rules[i].broken(p, msg, sizeof msg))
            return tpu_fail(err, TPU_ERR_INPUT, "%s", msg);
    return hbm_check_params(&p->hbm, err);
}

const char *tpu_param_rule(size_t i)
{
    /* The derived keys' order and conflicts, written once per entry of
     * derived[] (static: the text outlives the call). */
    static const char *const order[] = {
        "hbm.bandwidth_gbs is applied after hbm.channels and hbm.bus_bytes, "
        "in any order (it sets hbm.data_rate_gtps to bandwidth / (channels x "
        "bus_bytes)); not with hbm.data_rate_gtps",
    };
    _Static_assert(sizeof order / sizeof order[0] == NDERIVED,
                   "one help line per derived key");
    if (i < NRULES)
        return rules[i].help;
    return i - NRULES < NDERIVED ? order[i - NRULES] : NULL;
}
