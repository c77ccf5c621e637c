/* graph — a trace's layer graph after reading and shape inference.
 *
 * trace.c fills it from a `tpuemu-trace/1` file (every error names the
 * file and the JSON path); graph.c infers shapes, FLOPs and bytes.  The
 * graph is per example (batch is in the run section), channels last.
 * Inputs are layers too (op GOP_INPUT), so `in` indices point into one
 * array, and every index is smaller than the layer's own.
 */
#ifndef EMU_GRAPH_H
#define EMU_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "emu/status.h"

#define GRAPH_NAME_MAX 64
#define GRAPH_MAX_IN 16    /* inputs of one add/concat/loss layer (RetinaNet's
                              loss takes 5 levels x 2 heads) */
#define GRAPH_MAX_SP 3     /* spatial rank: 0 (flat), 2 (H,W) or 3 (D,H,W) */
#define GRAPH_MAX_PDIMS 5  /* N + up to 3 spatial + C */
/* Limits that keep every product in int64: any number written in a trace
 * (shape entry, filters, units, kernel, strides, dilation, window, factor)
 * is at most GRAPH_DIM_MAX; every tensor's per-example elements and every
 * layer's weights at most GRAPH_ELEMS_MAX (2^40; times a batch of up to
 * 2^20 and 4 bytes still fits in int64). */
#define GRAPH_DIM_MAX (1 << 20)
#define GRAPH_ELEMS_MAX ((int64_t)1 << 40)
/* Entries of graph.layers, and of graph.inputs, in one trace.  Real
 * networks have a few hundred to a few thousand layers; the bound keeps a
 * generated or corrupt trace from taking gigabytes (a glayer is ~340
 * bytes, and every stage keeps a few arrays per layer). */
#define GRAPH_LAYERS_MAX (1 << 18)
/* Bytes of a --freeze list, its NUL included (graph_freeze). */
#define GRAPH_FREEZE_MAX 1024

typedef enum {
    GOP_INPUT,
    GOP_CONV,
    GOP_CONV_T,
    GOP_DENSE,
    GOP_BATCHNORM,
    GOP_RELU,
    GOP_SIGMOID,
    GOP_FLATTEN,
    GOP_GAP,        /* global_avgpool */
    GOP_ADD,
    GOP_CONCAT,
    GOP_MAXPOOL,
    GOP_AVGPOOL,
    GOP_UPSAMPLE,
    GOP_DROPOUT,
    GOP_LOSS,
    GOP_ELEMWISE,   /* elementwise, `kind` a graph_ew; operands may
                       broadcast ([C] or [1,..,1,C] against [..,C]) */
    GOP_ACT,        /* activation, `kind` a graph_act */
    GOP_ROI_ALIGN,  /* levels -> [rois, out_h, out_w, C] per example */
    GOP_LAYERNORM,  /* layer_norm: each position over its channels */
    GOP_GROUPNORM,  /* group_norm: each example's `groups` channel groups
                       over every position (instance norm: groups = C) */
    GOP_NORMALIZE,  /* normalize: stored per-channel mean and variance
                       (Keras Normalization), never trained */
    GOP_PAD,        /* pad: zeros, pad_lo/pad_hi rows per spatial dim */
    GOP_CROP,       /* crop: pad_lo/pad_hi hold minus the rows cut */
    GOP_RESIZE,     /* resize: bilinear by integer `factor` per dim */
    GOP_RESHAPE,    /* reshape to `target` (same elements per example) */
    GOP_GMAXPOOL,   /* global_maxpool */
    GOP_COUNT
} graph_op;

/* elementwise kinds (docs/TRACE.md "elementwise") */
typedef enum {
    GEW_MULTIPLY,
    GEW_SUBTRACT,
    GEW_MAXIMUM,
    GEW_MINIMUM,
    GEW_AVERAGE,
    GEW_ADD, /* Keras Add whose operands broadcast (equal shapes: op add) */
    GEW_COUNT
} graph_ew;

/* How an elementwise operand meets the output (graph_ew_broadcast). */
typedef enum {
    GEW_BC_NONE,    /* the output's shape */
    GEW_BC_CHANNEL, /* one value per example and channel ([C], [1,1,C]) */
    GEW_BC_POSITION /* one value per position ([H,W,1]): a spatial gate */
} graph_ew_bc;

/* activation kinds (docs/TRACE.md "activation"): relu takes max_value
 * and alpha (the negative slope), leaky_relu and elu alpha; prelu has one
 * learnt slope per channel; softmax runs over the channels. */
typedef enum {
    GACT_RELU,
    GACT_RELU6,
    GACT_LEAKY_RELU,
    GACT_ELU,
    GACT_GELU,
    GACT_SWISH,
    GACT_HARD_SIGMOID,
    GACT_TANH,
    GACT_SOFTMAX,
    GACT_PRELU,
    GACT_COUNT
} graph_act;

typedef enum {
    GLOSS_SOFTMAX_XENT,
    GLOSS_SIGMOID_FOCAL,
    GLOSS_DICE,
    GLOSS_L2,
    GLOSS_SMOOTH_L1,
    GLOSS_SIGMOID_XENT /* binary cross-entropy on logits, per element */
} graph_loss;

/* run.optimizer: the update at the end of a training step (docs/TRACE.md).
 * Momentum is 0, so a graph built by hand updates as a trace without the
 * key does. */
typedef enum {
    GOPT_MOMENTUM,
    GOPT_SGD,
    GOPT_ADAM,
    GOPT_RMSPROP,
    GOPT_LARS,
    GOPT_COUNT
} graph_optimizer;

/* A per-example tensor shape: spatial extents then channels. */
typedef struct {
    int nsp;                     /* 0, 2 or 3 */
    int64_t sp[GRAPH_MAX_SP];    /* D,H,W (3D) or H,W (2D) */
    int64_t c;                   /* channels (features when nsp == 0) */
} gshape;

typedef struct {
    char name[GRAPH_NAME_MAX];
    graph_op op;
    int n_in;
    int in[GRAPH_MAX_IN];        /* indices of earlier layers */
    int dtype_bytes;             /* 2 (bf16, default) or 4 (f32) */
    gshape out;                  /* inferred output shape */

    /* conv, conv_transpose, pooling (spatial rank = out.nsp) */
    int filters;                 /* conv, conv_t; units for dense */
    int kernel[GRAPH_MAX_SP];    /* conv window; pooling window */
    int strides[GRAPH_MAX_SP];
    int dilation[GRAPH_MAX_SP];
    int pad_same;                /* 1: same, 0: valid */
    int use_bias;
    int groups;                  /* conv "groups" (XLA feature_group_count):
                                    the input channels and the filters are cut
                                    into this many groups, each filter seeing
                                    only its group's Cin/groups channels
                                    (depthwise: groups = Cin).  0 or 1: an
                                    ordinary convolution (a zeroed layer is
                                    one); use graph_groups() */
    /* Explicit padding of the input, derived from padding/kernel/strides
     * (TensorFlow rules: same pads total max((ceil(in/s)-1)*s + (k-1)*d + 1 - in, 0),
     * low = total / 2, the extra one on the high side).  conv_transpose:
     * the padding of the equivalent stride-1 conv over the input dilated
     * by strides (s-1 zeros between elements), as TF's gradient lowers it:
     * valid: k-1 each side; same: total s+k-2, low = k-1 - floor(max(k-s,0)/2). */
    int64_t pad_lo[GRAPH_MAX_SP], pad_hi[GRAPH_MAX_SP];
    int factor[GRAPH_MAX_SP];    /* upsample */
    double rate;                 /* dropout */
    graph_loss loss;
    int share_from;              /* optional "share_weights": index of the
                                    layer whose weights this one reuses
                                    (RetinaNet's heads across FPN levels, a
                                    Siamese encoder's convs, dense layers
                                    and normalisations), -1 */
    int frozen;                  /* "trainable": false on a layer with
                                    weights: they get no gradient, no
                                    optimizer state and no update (a sharer
                                    has its owner's setting).  0 by default,
                                    so a zeroed layer trains. */

    /* derived in training: the gradient of this layer's output is needed,
     * because a trainable layer feeds it (or is it).  Without it the
     * backward pass has nothing to do here (TF differentiates only
     * towards the trainable variables: a frozen stem costs no backward). */
    int needs_grad;
    /* derived by graph_finish; 0 in a graph it has not seen (every layer
     * computed and reached by the loss).
     * no_loss: no loss depends on this layer (a loss-less graph counts its
     * sinks as losses): its gradient is zero, so TensorFlow gives its
     * weights none and nothing below it learns through it.
     * unused: in training, a layer that feeds no loss and no batchnorm
     * (whose moving statistics are an update op the step runs): XLA's dead
     * code elimination removes it from the step. */
    int no_loss;
    int unused;
    /* derived by graph_finish on a layer that owns weights: no layer using
     * them (it or a sharer) is reached by a loss, so they get no gradient
     * and no optimizer state (graph_trainable_weights). */
    int weights_no_grad;
    /* An input (GOP_INPUT) whose input_partition_dims entry is null or all
     * ones: replicated, whole on every core of a replica.  0 = split like
     * the first input (the reader refuses any other list), as in a graph
     * built by hand. */
    int whole;
    /* "core": k (tf.contrib.tpu.core(k)): the layer runs whole on core k
     * of its replica, the replica's other cores idle for it.  Stored as
     * k + 1, 0 = no placement (a zeroed layer has none); graph_core(). */
    int place;
    /* batchnorm "statistics": "moving": normalises with the stored moving
     * statistics in training too (TF training=False: a frozen backbone's
     * batchnorm), so no batch statistics and no exchange. */
    int bn_moving;
    /* batchnorm, layer_norm, group_norm "scale": false / "center": false
     * (Keras's scale=False, center=False): no gamma (fixed at 1) / no beta
     * (fixed at 0).  Stored negated so a zeroed layer has both.  The
     * weights are [gamma (C)][beta (C)], each only when present. */
    int no_scale, no_center;
    /* roi_align: ROIs per example, the output bins [out_h, out_w], and
     * whether the levels are padded to the first level's extent and
     * stacked before the gather ("levels": "padded") rather than
     * concatenated ("concat"). */
    int rois;
    int roi_out[2];
    int roi_padded;
    /* flatten "keep": k: the first k spatial dimensions stay (one row per
     * ROI), the others fold into the channels and become 1; 0 = flat. */
    int flat_keep;

    /* elementwise and activation: the graph_ew or graph_act kind; alpha
     * (leaky_relu, elu, relu's negative slope) and max_value (relu; 0:
     * none) */
    int kind;
    double alpha, max_value;
    /* reshape: the per-example shape the trace asks for */
    gshape target;

    /* derived, per example */
    int64_t weights;             /* parameters (incl. bias, BN gamma/beta),
                                    trainable or frozen; 0 on a sharer */
    double macs;                 /* forward multiply-adds (conv, conv_t, dense) */
} glayer;

typedef struct {
    char name[128];
    char system[32];
    int train;                   /* 1: train, 0: infer */
    int64_t global_batch;
    int cores_per_replica;
    /* input_partition_dims for the first input (all 1 when absent or null);
     * rank = 2 + nsp of that input.  Order N, [D,] H, W, C. */
    int pdims_rank;
    int pdims[GRAPH_MAX_PDIMS];
    int labels_partitioned;      /* the labels' entry was a list, not null */
    int pdims_override;          /* pdims came from --partition, not the
                                    trace (reports record them then) */
    graph_optimizer optimizer;   /* run.optimizer */
    /* run.batchnorm_group: how many replicas one batchnorm's statistics
     * span in training (TF's distributed batchnorm, MLPerf ResNet-50's
     * --distributed_group_size); 1 (or 0 in a graph built by hand): each
     * replica's own examples. */
    int bn_group;
    double opt_momentum;         /* rmsprop's "momentum" (0: no slot) */
    int has_reference;
    double reference_step_s;
    char reference_source[512];
    /* reference.family: the rows validate summarises together (one code
     * base, e.g. "resnet"); "" when absent.  reference.baseline: the name
     * of the trace this one is compared with at equal code (another
     * per-core batch or partitioning of the same model); "" when none. */
    char reference_family[32];
    char reference_baseline[128];

    int n_layers;
    glayer *layers;              /* owned */
    int n_inputs;                /* layers[0..n_inputs) are the graph's
                                    inputs (GOP_INPUT), in trace order */

    /* Name index for graph_find (open addressing, linear probing): slot
     * values are layer index + 1, 0 = empty.  Filled by the reader as it
     * names each layer (graph_index_add); layers[n_indexed..n_layers)
     * (added by hand, without the index) are found by a scan.  Owned. */
    int *name_slots;
    int name_cap;                /* slots, a power of two, or 0 */
    int n_indexed;

    /* The --freeze list graph_freeze applied ("" when none was), which
     * reports record: the trace's trainable flags alone do not say what
     * trained. */
    char freeze[GRAPH_FREEZE_MAX];
} graph;

/* Reads and checks a trace file (emu/trace.c; docs/TRACE.md).  On failure
 * returns TPU_ERR_INPUT with "FILE: JSON.path: what is wrong" in err (a
 * missing or unreadable file too, with the OS reason), TPU_ERR_SYSTEM only
 * when host memory runs out.  A FIFO or pipe (`<(...)`) is read with an
 * idle timeout; other non-regular files are refused.  Only what does not
 * depend on the slice and batch is checked here: the system must be a
 * known name, but whether num_cores_per_replica and global_batch fit it is
 * checked by graph_check_run against the effective system and batch
 * (--system/--batch), which sim_run and sim_lower do.  g is always safe to
 * graph_free afterwards. */
tpu_status graph_load(graph *g, const char *path, tpu_error *err);
/* Same, from text already in memory; `path` only names it in messages. */
tpu_status graph_parse(graph *g, const char *text, size_t len,
                       const char *path, tpu_error *err);
void graph_free(graph *g);

/* Checks the run section against a slice and batch (which --system and
 * --batch may override): known system, cores divisible by
 * cores_per_replica, batch divisible by replicas, partition dims that
 * split only spatial dimensions no smaller than their factor.  `path`
 * names the trace in messages ("FILE: run.global_batch: ..."). */
tpu_status graph_check_run(const graph *g, const char *system,
                           int64_t global_batch, const char *path,
                           tpu_error *err);
/* Only the first check: system names a known slice ("FILE: system:
 * unknown slice 'v3-7' (known: ...)"). */
tpu_status graph_check_system(const char *system, const char *path,
                              tpu_error *err);

/* Infers layer i's output shape, padding, weights, MACs and needs_grad
 * from its parameters and its inputs' (already inferred) ones.  On a mismatch
 * returns TPU_ERR_INPUT with *key naming the offending trace key ("in",
 * "kernel", ...) and err holding the reason without file or path, which
 * the caller prefixes. */
tpu_status graph_infer_layer(graph *g, int i, const char **key,
                             tpu_error *err);

/* What depends on the whole graph (no_loss, unused; needs_grad again),
 * once every layer is inferred: the reader calls it last.  Returns
 * TPU_ERR_SYSTEM when out of memory. */
tpu_status graph_finish(graph *g, tpu_error *err);

/* --freeze LIST: overrides the trace's `trainable` flags as if the trace
 * had said so, and recomputes what depends on them (needs_grad; the
 * trainable weight counts follow).  LIST is comma-separated layer names;
 * an entry ending in '*' is a prefix (every layer whose name starts with
 * the rest); each matched conv, conv_transpose, dense or batchnorm layer
 * becomes frozen, the other layers a prefix matches are skipped, and the
 * others keep the trace's setting.  "none" alone makes every layer
 * trainable.  Shared weights freeze together: a sharer follows its owner,
 * so naming a sharer whose owner is not named is an error.
 * TPU_ERR_INPUT ("--freeze: ...", `path` naming the trace) for an entry
 * that matches no layer, a name of a layer without weights, an empty
 * entry, "none" with names, or a list of GRAPH_FREEZE_MAX bytes or more;
 * g is unchanged then.  TPU_ERR_SYSTEM when out of memory.  On success
 * the list is kept in g->freeze. */
tpu_status graph_freeze(graph *g, const char *list, const char *path,
                        tpu_error *err);
/* graph_freeze's checks alone, with its messages and statuses: g is only
 * read (a sweep checks each --freeze list of its grid on the base trace). */
tpu_status graph_freeze_check(const graph *g, const char *list,
                              const char *path, tpu_error *err);

/* A conv's groups: L->groups when above 1, else 1 (every other op, and
 * a layer built by hand without the field). */
int graph_groups(const glayer *L);

/* The core of its replica layer L is placed on ("core"), or -1. */
int graph_core(const glayer *L);
/* Elements per example of the tensor roi_align layer L reads: its levels
 * as they lie (concat), or each padded to the first level's extent
 * (padded). */
int64_t graph_roi_level_elems(const graph *g, const glayer *L);

/* Elements of a shape (per example). */
int64_t gshape_elems(const gshape *s);
/* Forward FLOPs of the whole graph per example (2 x MACs of the matrix
 * layers + elementwise work), unused layers left out. */
double graph_forward_flops(const graph *g);
/* Forward FLOPs of layer i per example: 2 x MACs + elementwise work (1
 * per output element for relu, sigmoid, batchnorm apply, dropout, bias and
 * each pairwise add; one per window element for pooling; one per input
 * element for global_avgpool and loss; 0 for flatten, concat, upsample). */
double graph_layer_flops(const graph *g, int i);
/* Backward FLOPs of the whole graph per example: matrix layers 2 x MACs
 * for the weight gradient (when the weights train) and 2 x MACs for the
 * input gradient (when the input needs a gradient: not data, not a frozen
 * prefix), elementwise layers 2 x their forward work; nothing for a layer
 * that needs no gradient (needs_grad). */
double graph_backward_flops(const graph *g);
/* Whether layer i computes a gradient for its weights (its owner's, for a
 * sharer): they exist, are not frozen, and a loss reaches layer i. */
int graph_layer_trains(const graph *g, int i);
/* Bytes of layer i's output per example, in its dtype. */
int64_t graph_layer_out_bytes(const graph *g, int i);
/* Parameters of the whole graph, frozen ones included (shared weights
 * counted once). */
int64_t graph_weights(const graph *g);
/* The trainable ones a loss reaches (what gets gradients and optimizer
 * state; TensorFlow gives a variable no loss depends on no gradient). */
int64_t graph_trainable_weights(const graph *g);
/* Name of an op as it is written in traces ("conv", "global_avgpool"). */
const char *graph_op_name(graph_op op);
/* Index of the layer called name, or -1.  Constant time for the layers
 * the reader indexed. */
int graph_find(const graph *g, const char *name);
/* Makes room in the name index for n layers (the reader calls it once with
 * the trace's count).  TPU_ERR_SYSTEM when out of memory. */
tpu_status graph_index_reserve(graph *g, int n, tpu_error *err);
/* Adds layer i (its name set, not yet in the index) to the name index;
 * i must be n_indexed (layers are indexed in order). */
void graph_index_add(graph *g, int i);
/* run.optimizer's word for k ("adam"); NULL outside the enum.  By name:
 * the optimizer, or -1 for an unknown word.  graph_optimizer_words: every
 * word, "sgd, momentum, adam, rmsprop, lars", for messages. */
const char *graph_optimizer_name(int k);
int graph_optimizer_find(const char *name);
const char *graph_optimizer_words(void);
/* fp32 slots the optimizer keeps per trainable weight (sgd 0, momentum 1,
 * adam 2 (m, v), rmsprop 1 or 2 with momentum, lars 1). */
int graph_optimizer_slots(const graph *g);
/* Per-channel parameters of a batchnorm, layer_norm or group_norm: 2,
 * less one for each of "scale": false and "center": false. */
int graph_norm_params(const glayer *L);
/* Name of a loss kind as written in traces ("softmax_xent"). */
const char *graph_loss_name(graph_loss k);
/* Names of the elementwise and activation kinds ("multiply", "swish"). */
const char *graph_ew_name(int kind);
const char *graph_act_name(int kind);
/* How operand k of an elementwise layer broadcasts (graph_ew_bc): one
 * value per example and channel against an output with positions, or one
 * value per position (C = 1) against an output with channels. */
graph_ew_bc graph_ew_broadcast(const graph *g, const glayer *L, int k);
/* Vector operations per element of an activation, forward and backward
 * (docs/TRACE.md "activation": from each formula). */
double graph_act_ops(const glayer *L, int backward);

#endif
