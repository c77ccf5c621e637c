#include "firmware/isa.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The decoder table: name and the operand names printed in listings. */
static const struct {
    const char *name;
    const char *args[4];
} ops[FW_OP_COUNT] = {
    [FW_DMA_LD] = {"dma.ld", {"bytes", 0, 0, 0}},
    [FW_DMA_ST] = {"dma.st", {"bytes", 0, 0, 0}},
    [FW_WAIT_LD] = {"dma.wait.ld", {"pending", 0, 0, 0}},
    [FW_WAIT_ST] = {"dma.wait.st", {"pending", 0, 0, 0}},
    [FW_MATMUL] = {"mxu.matmul", {"m", "k", "n", "epi"}},
    [FW_VEC] = {"vpu.op", {"elems", "ops_x100", 0, 0}},
    [FW_HALO] = {"ici.halo", {"dim", "from_lo", "from_hi", 0}},
    [FW_ALLREDUCE] = {"ici.allreduce", {"bytes", "group", 0, 0}},
    [FW_ALLGATHER] = {"ici.allgather", {"bytes", 0, 0, 0}},
    [FW_BARRIER] = {"sync.barrier", {0, 0, 0, 0}},
    [FW_LOOP] = {"loop", {"count", 0, 0, 0}},
    [FW_ENDLOOP] = {"endloop", {0, 0, 0, 0}},
};

const char *fw_op_name(fw_op op)
{
    return (unsigned)op < FW_OP_COUNT ? ops[op].name : "?";
}

void fw_program_init(fw_program *p) { memset(p, 0, sizeof *p); }

void fw_program_free(fw_program *p)
{
    free(p->code);
    memset(p, 0, sizeof *p);
}

void fw_emit(fw_program *p, fw_op op, int phase, int layer, int64_t a,
             int64_t b, int64_t c, int64_t d)
{
    if (p->oom)
        return;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        fw_insn *nc = realloc(p->code, cap * sizeof *nc);
        if (!nc) {
            p->oom = 1;
            return;
        }
        p->code = nc;
        p->cap = cap;
    }
    fw_insn *in = &p->code[p->n++];
    memset(in, 0, sizeof *in);
    in->op = (uint8_t)op;
    in->phase = (uint8_t)phase;
    in->passes = 1;
    in->layer = layer;
    in->a = a;
    in->b = b;
    in->c = c;
    in->d = d;
}

void fw_format(const fw_insn *in, char *buf, size_t cap)
{
    size_t o = 0;
    const char *name = fw_op_name((fw_op)in->op);
    int w = snprintf(buf, cap, "%-14s", name);
    o = w > 0 ? (size_t)w : 0;
    const int64_t v[4] = {in->a, in->b, in->c, in->d};
    for (int i = 0; i < 4 && o < cap; i++) {
        const char *an = (unsigned)in->op < FW_OP_COUNT ? ops[in->op].args[i]
                                                          : NULL;
        if (!an)
            continue;
        w = snprintf(buf + o, cap - o, " %s=%" PRId64, an, v[i]);
        o += w > 0 ? (size_t)w : 0;
    }
    if (in->op == FW_HALO && o < cap) {
        w = snprintf(buf + o, cap - o, " rows=%" PRId64 "/%" PRId64,
                     fw_halo_rows_lo(in), fw_halo_rows_hi(in));
        o += w > 0 ? (size_t)w : 0;
    }
    if (in->op == FW_VEC && in->c > 0 && o < cap) {
        w = snprintf(buf + o, cap - o, " serial=%" PRId64, in->c);
        o += w > 0 ? (size_t)w : 0;
    }
    if (in->op == FW_MATMUL && in->passes > 1 && o < cap) {
        w = snprintf(buf + o, cap - o, " passes=%d", in->passes);
        o += w > 0 ? (size_t)w : 0;
    }
    if (in->op == FW_MATMUL && in->kparts > 1 && o < cap) {
        w = snprintf(buf + o, cap - o, " kparts=%" PRId64, in->kparts);
        o += w > 0 ? (size_t)w : 0;
    }
    if (in->fx != FX_NONE && in->fx < FX_KIND_COUNT && o < cap)
        snprintf(buf + o, cap - o, " fx=%s", fw_fx_name((fx_kind)in->fx));
}

const char *fw_fx_name(fx_kind k)
{
    static const char *const names[FX_KIND_COUNT] = {
        "none", "fwd", "dx", "dw", "bstat", "bwd", "update"};
    return (unsigned)k < FX_KIND_COUNT ? names[k] : "?";
}

const char *fw_gconv_name(fw_gconv g)
{
    static const char *const names[FW_GC_COUNT] = {"none", "dense",
                                                   "per_group", "vector"};
    return (unsigned)g < FW_GC_COUNT ? names[g] : "?";
}

int fw_gconv_part(const fw_insn *in)
{
    if (in->gconv == FW_GC_NONE)
        return -1;
    switch ((fx_kind)in->fx) {
    case FX_FWD:
        return 0;
    case FX_DX:
        return 1;
    case FX_DW:
        return 2;
    default:
        return -1;
    }
}

tpu_status fw_validate(const fw_program *p, tpu_error *err)
{
    int depth = 0;
    for (size_t i = 0; i < p->n; i++) {
        const fw_insn *in = &p->code[i];
        if (in->op >= FW_OP_COUNT)
            return tpu_fail(err, TPU_ERR_SYSTEM, "insn %zu: bad opcode", i);
        if (in->op == FW_LOOP) {
            if (depth++)
                return tpu_fail(err, TPU_ERR_SYSTEM, "insn %zu: nested loop",
                                i);
            if (in->a < 1)
                return tpu_fail(err, TPU_ERR_SYSTEM, "insn %zu: loop count",
                                i);
        } else if (in->op == FW_ENDLOOP) {
            if (--depth < 0)
                return tpu_fail(err, TPU_ERR_SYSTEM, "insn %zu: endloop", i);
        } else if (depth && (in->op == FW_HALO || in->op == FW_ALLREDUCE ||
                             in->op == FW_ALLGATHER || in->op == FW_BARRIER)) {
            return tpu_fail(err, TPU_ERR_SYSTEM,
                            "insn %zu: collective inside a loop", i);
        }
    }
    if (depth)
        return tpu_fail(err, TPU_ERR_SYSTEM, "unterminated loop");
    return TPU_OK;
}
