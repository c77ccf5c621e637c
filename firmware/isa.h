/* isa — the TensorCore firmware instruction set tpuemu executes.
 *
 * The real core issues 322-bit VLIW bundles (2 scalar, 4 vector, 2 matrix,
 * 1 misc slot; Hot Chips 2020).  tpuemu works one level up: an instruction
 * is one unit-level operation on a tile (a DMA block, an M x K x N matrix
 * product on the MXUs, a vector pass over a tile, a collective), which is
 * what the pod engine times.  Loops keep programs small: a layer is a few
 * instructions around a LOOP over its VMEM-sized tiles.
 *
 * Encoding: every instruction is one fw_insn {op, phase, passes, layer,
 * a, b, c, d}.  Operands by opcode (the table in isa.c is the decoder):
 *
 *   op          a           b             c          d           meaning
 *   dma.ld      bytes       -             -          -           HBM -> VMEM block, async (tag = issue order)
 *   dma.st      bytes       -             -          -           VMEM -> HBM block, async
 *   dma.wait.ld n           -             -          -           wait until <= n loads are in flight
 *   dma.wait.st n           -             -          -           wait until <= n stores are in flight
 *   mxu.matmul  m           k             n          epi elems   C[m,n] += A[m,k] B[k,n] on the core's MXUs
 *                                                                (bf16; `passes` bf16 passes for f32), with
 *                                                                `d` fp32 vector ops overlapped (VLIW)
 *   vpu.op      elems       ops/elem x100 serial     -           vector unit pass over a VMEM tile; serial:
 *                                                                scatter-add update windows applied in order
 *   ici.halo    dim         from lo       from hi    rows        collective-permute: receive that many bytes from the neighbours along
 *                                                                split spatial dim `dim` (partition group); rows = lo rows << 32 | hi rows
 *   ici.allreduce bytes     group         -          -           sum across group: 0 partition group, 1 all cores
 *   ici.allgather bytes     -             -          -           gather `bytes` (the whole tensor) in the group, where a
 *                                                                window reaches past the neighbours; timed as halo
 *   sync.barrier -          -             -          -           all cores
 *   loop        count       -             -          -           repeat the body up to the matching endloop
 *   endloop     -           -             -          -
 */
#ifndef FIRMWARE_ISA_H
#define FIRMWARE_ISA_H

#include <stddef.h>
#include <stdint.h>

#include "emu/status.h"

typedef enum {
    FW_DMA_LD,
    FW_DMA_ST,
    FW_WAIT_LD,
    FW_WAIT_ST,
    FW_MATMUL,
    FW_VEC,
    FW_HALO,
    FW_ALLREDUCE,
    FW_ALLGATHER,
    FW_BARRIER,
    FW_LOOP,
    FW_ENDLOOP,
    FW_OP_COUNT
} fw_op;

/* FW_GROUP_BN: run.batchnorm_group consecutive replicas (every core of
 * each), a distributed batchnorm's statistics. */
enum { FW_GROUP_PARTITION = 0, FW_GROUP_ALL = 1, FW_GROUP_BN = 2 };

/* What a compute instruction computes, for --functional (emu/fexec.h):
 * the timing never depends on it. */
typedef enum {
    FX_NONE,    /* moves or re-reads data another instruction accounts for */
    FX_FWD,     /* the layer's forward values (matmul: the next M rows) */
    FX_DX,      /* input gradient rows (matmul) */
    FX_DW,      /* weight gradient rows (matmul) */
    FX_BSTAT,   /* backward reductions (batchnorm) */
    FX_BWD,     /* the layer's input gradient (vector pass) */
    FX_UPDATE,  /* the optimizer step */
    FX_KIND_COUNT
} fx_kind;

/* How a grouped convolution's part was lowered (firmware/gconv.c gconv_pick;
 * docs/FIRMWARE.md): the block-diagonal filter expanded to a dense one, one
 * MXU product per group, or a vector-unit pass (depthwise only).  The
 * numbers are xla.group_conv's, which forces one (0 there: the fastest). */
typedef enum {
    FW_GC_NONE = 0,
    FW_GC_DENSE = 1,
    FW_GC_GROUPS = 2,
    FW_GC_VECTOR = 3,
    FW_GC_COUNT
} fw_gconv;

typedef struct {
    uint8_t op;      /* fw_op */
    uint8_t phase;   /* emu_phase */
    uint8_t passes;  /* MXU passes per product (1 bf16; 3 for f32) */
    uint8_t fx;      /* fx_kind */
    int32_t layer;   /* graph layer, -1 for none */
    int64_t a, b, c, d;
    int64_t e;       /* mxu.matmul: rows of the whole product (the M the
                        tiles walk per N chunk), for --functional */
    int64_t kparts;  /* mxu.matmul: the product's K is cut into this many
                        slices (weights too large for VMEM); b is one
                        slice.  0 or 1: whole.  For --functional */
    uint8_t recompute; /* rebuilds the layer's output that xla.remat
                          dropped from the saved set (the listing marks
                          it); never read by the timing */
    uint8_t gconv;   /* fw_gconv: the grouped convolution's candidate this
                        instruction belongs to (firmware/gconv.c gconv_emit),
                        FW_GC_NONE for any other; for --functional and the
                        listings, never read by the timing */
} fw_insn;

typedef struct {
    fw_insn *code;
    size_t n, cap;
    int oom;         /* an emit ran out of memory: the program is invalid */
} fw_program;

const char *fw_op_name(fw_op op);
const char *fw_fx_name(fx_kind k);
/* "dense", "per_group", "vector" ("none" for FW_GC_NONE); the report's
 * layers[].grouped values. */
const char *fw_gconv_name(fw_gconv g);
/* Which part of its grouped layer an instruction computes: 0 forward, 1
 * input gradient, 2 weight gradient, -1 none (not a grouped candidate's,
 * or moves no values: its tag is in.fx). */
int fw_gconv_part(const fw_insn *in);
void fw_program_init(fw_program *p);
void fw_program_free(fw_program *p);
/* Rows of an ici.halo's operand d. */
static inline int64_t fw_halo_rows_lo(const fw_insn *in) { return in->d >> 32; }
static inline int64_t fw_halo_rows_hi(const fw_insn *in) { return in->d & 0xffffffff; }
/* Appends one instruction (sets p->oom instead of failing). */
void fw_emit(fw_program *p, fw_op op, int phase, int layer, int64_t a,
             int64_t b, int64_t c, int64_t d);
/* One instruction in the assembler syntax, e.g.
 * "mxu.matmul m=4096 k=1152 n=256 epi=1048576" (no layer comment). */
void fw_format(const fw_insn *in, char *buf, size_t cap);
/* Checks structure: loops balanced and not nested, operands in range. */
tpu_status fw_validate(const fw_program *p, tpu_error *err);

#endif
