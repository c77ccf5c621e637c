/* tpuemu lower: print one core's firmware program; with --timed, the step
 * run simulates puts each block's critical-path time on its comment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/graph.h"
#include "emu/out/chart.h"
#include "emu/result.h"
#include "emu/sim.h"

static const char usage[] =
    "usage: tpuemu lower TRACE.json [--core N] [--timed] [--system NAME]\n"
    "                   [--batch N] [--set KEY=VALUE ...] [--freeze LIST]\n"
    "\n"
    "Prints the firmware program of one core (default 0) in tpuemu's\n"
    "assembler syntax: one instruction a line, `; layer phase` comments,\n"
    "loops indented.  docs/FIRMWARE.md (\"Reading a listing\") says what\n"
    "every opcode does and the unit of every operand.  The what-if\n"
    "options are run's: --set xla.* switches change the program.\n"
    "\n"
    "  --core N        the core whose program is printed (default 0)\n"
    "  --timed         also simulate the step as `run` does (same options)\n"
    "                  and put on each `; layer phase` comment the time\n"
    "                  this core's critical path spent in that block, by\n"
    "                  category (what the report's layers[] sums per layer\n"
    "                  for core 0), and its share of the core's step\n";

static const char usage_tail[] =
    "\n"
    "exit status: 0 done, 2 bad input or usage (standard output that\n"
    "cannot be written included), 3 does not fit the hardware (the\n"
    "program is still printed whole: what the core would run, untimed),\n"
    "4 out of host memory\n";

/* A maximal run of instructions of one layer phase: what one `; layer
 * phase` comment heads. */
typedef struct {
    size_t first, end;       /* instructions [first, end) */
    int layer, phase, recompute;
    double t[CAT_COUNT];     /* critical-path seconds (--timed) */
} block;

static int same_block(const block *b, const fw_insn *in)
{
    return b->layer == in->layer && b->phase == in->phase &&
           b->recompute == in->recompute;
}

/* The blocks of prog (n_out of them; NULL when out of memory). */
static block *find_blocks(const fw_program *prog, size_t *n_out)
{
    block *bs = malloc((prog->n + 1) * sizeof *bs);
    size_t n = 0;
    if (!bs)
        return NULL;
    for (size_t i = 0; i < prog->n; i++) {
        const fw_insn *in = &prog->code[i];
        if (n == 0 || !same_block(&bs[n - 1], in)) {
            block *b = &bs[n++];
            memset(b, 0, sizeof *b);
            b->first = i;
            b->layer = in->layer;
            b->phase = in->phase;
            b->recompute = in->recompute;
        }
        bs[n - 1].end = i + 1;
    }
    *n_out = n;
    return bs;
}

/* Charges each critical-path event of a core to a block.  The engine
 * runs a core's instructions in program order and tags each span with
 * the instruction that moved the clock (a skipped loop's iterations with
 * the loop's), so the spans walk the blocks forward: a span goes to the
 * first block of its layer phase at or after the last one charged.  The
 * totals per layer phase are exact whatever the walk; a span is charged
 * to an earlier block of its layer phase only when a block between them
 * took no time at all.  Returns the seconds no block matched (0). */
static double charge_events(block *bs, size_t nb, const emu_core_result *pc)
{
    size_t at = 0;
    double lost = 0;
    for (size_t i = 0; i < pc->n_events; i++) {
        const emu_event *e = &pc->events[i];
        if (e->unit != UNIT_CORE || e->cat >= CAT_COUNT)
            continue;
        size_t j = at, hit = nb;
        for (; j < nb; j++)
            if (bs[j].layer == e->layer && bs[j].phase == e->phase) {
                hit = j;
                break;
            }
        for (j = 0; hit == nb && j < at; j++)
            if (bs[j].layer == e->layer && bs[j].phase == e->phase)
                hit = j;
        if (hit == nb) {
            lost += e->t1 - e->t0;
            continue;
        }
        at = hit;
        bs[hit].t[e->cat] += e->t1 - e->t0;
    }
    return lost;
}

static double sum_cats(const double *t)
{
    double s = 0;
    for (int k = 0; k < CAT_COUNT; k++)
        s += t[k];
    return s;
}

/* " 1.287 s = 11.4%: mxu 1.287 s, hbm_stall 26.41 us" (no leading
 * space when the time is 0: "0 s"). */
static void put_times(const double *t, double step)
{
    char b[32];
    double tot = sum_cats(t);
    chart_fmt_time(b, sizeof b, tot, CHART_TIME_SIG_UNIT, 0);
    if (tot <= 0) {
        fputs("0 s", stdout);
        return;
    }
    printf("%s = %.3g%%:", b, step > 0 ? 100 * tot / step : 0);
    int first = 1;
    for (int k = 0; k < CAT_COUNT; k++) {
        if (t[k] <= 0)
            continue;
        chart_fmt_time(b, sizeof b, t[k], CHART_TIME_SIG_UNIT, 0);
        printf("%s %s %s", first ? "" : ",", emu_cat_name((emu_cat)k), b);
        first = 0;
    }
}

/* Bytes a block stores (its dma.st blocks, loops counted). */
static double block_stored(const fw_program *prog, const block *b)
{
    double s = 0, mult = 1;
    for (size_t i = b->first; i < b->end; i++) {
        const fw_insn *in = &prog->code[i];
        if (in->op == FW_LOOP)
            mult = (double)in->a;
        else if (in->op == FW_ENDLOOP)
            mult = 1;
        else if (in->op == FW_DMA_ST)
            s += mult * (double)in->a;
    }
    return s;
}

static void fmt_bytes(char *buf, size_t cap, double b)
{
    if (b >= 1024.0 * 1024 * 1024)
        snprintf(buf, cap, "%.3g GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024)
        snprintf(buf, cap, "%.3g MiB", b / (1024.0 * 1024));
    else if (b >= 1024)
        snprintf(buf, cap, "%.3g KiB", b / 1024);
    else
        snprintf(buf, cap, "%.0f B", b);
}

static const char *layer_name(const graph *g, int l)
{
    return l >= 0 && l < g->n_layers ? g->layers[l].name : "(step)";
}

/* A grouped convolution's block names the candidate each of its parts
 * took (firmware/lower.c gc_pick): " (grouped: vector)" on a forward
 * block, " (grouped: input gradient dense, weight gradient per_group)" on
 * a backward one. */
static void put_gconv(const fw_program *prog, const block *b)
{
    static const char *const part[3] = {"forward", "input gradient",
                                        "weight gradient"};
    uint8_t gc[3] = {0, 0, 0};
    for (size_t i = b->first; i < b->end; i++) {
        int k = fw_gconv_part(&prog->code[i]);
        if (k >= 0)
            gc[k] = prog->code[i].gconv;
    }
    const char *sep = " (grouped: ";
    for (int k = 0; k < 3; k++)
        if (gc[k]) {
            /* a forward block has one part: the block's name says it */
            if (k == 0 && !gc[1] && !gc[2])
                printf("%s%s", sep, fw_gconv_name((fw_gconv)gc[k]));
            else
                printf("%s%s %s", sep, part[k],
                       fw_gconv_name((fw_gconv)gc[k]));
            sep = ", ";
        }
    if (*sep == ',')
        putchar(')');
}

/* The block comment: "; conv1 forward", what marks it, and its time. */
static void put_block_head(const graph *g, const fw_program *prog,
                           const block *bs, size_t k, int timed, double step)
{
    const block *b = &bs[k];
    printf("\n; %s %s%s", layer_name(g, b->layer),
           emu_phase_name((emu_phase)b->phase),
           b->layer >= 0 && b->layer < g->n_layers && g->layers[b->layer].frozen
               ? " (frozen)"
               : "");
    put_gconv(prog, b);
    if (b->recompute) {
        char by[32];
        fmt_bytes(by, sizeof by, block_stored(prog, b));
        const char *from = "its input";
        if (b->layer >= 0 && b->layer < g->n_layers &&
            g->layers[b->layer].n_in > 0)
            from = layer_name(g, g->layers[b->layer].in[0]);
        printf(": recompute (xla.remat dropped this output, %s, to fit HBM;"
               " rebuilt from %s", by, from);
        /* for its last reader's backward, which runs first (backward goes
         * in reverse layer order; emit_recompute in firmware/lower.c) */
        int last = -1;
        for (int l = 0; l < g->n_layers; l++) {
            if (g->layers[l].unused)
                continue;
            for (int i = 0; i < g->layers[l].n_in; i++)
                if (g->layers[l].in[i] == b->layer)
                    last = l;
        }
        if (last >= 0)
            printf(" for %s's backward", layer_name(g, last));
        putchar(')');
    }
    if (timed) {
        fputs("  [", stdout);
        put_times(b->t, step);
        putchar(']');
    }
    putchar('\n');
}

/* The units of the operands, in the header (docs/FIRMWARE.md has the
 * table).  No mnemonic appears in it: users count instructions with
 * `grep -c`. */
static const char legend[] =
    "; operands: bytes=, from_lo=, from_hi= are bytes (from_lo/hi: from each "
    "neighbour); m k n: a product's rows, depth, columns (k is one part's "
    "with kparts=); epi= fp32 vector ops beside it\n"
    "; elems= vector elements, ops_x100= ops per element x100; group=0 "
    "partition group, 1 all cores, 2 a batchnorm group of replicas; pending= transfers left in flight; "
    "docs/FIRMWARE.md, \"Reading a listing\"\n";

/* The step simulated as run does, for --timed: r filled (free it), or a
 * reason in why[] when it cannot be timed (does not fit), or an exit
 * status (error printed). */
static int time_step(const graph *g, const sim_opts *o0, emu_result *r,
                     char *why, size_t cap)
{
    sim_opts o = *o0;
    o.record_timeline = 1;
    tpu_error err = {0};
    tpu_status rc = sim_run(g, &o, r, &err);
    if (rc == TPU_ERR_NOFIT) {
        snprintf(why, cap, "the step does not fit (run refuses it: %s)",
                 err.msg);
        emu_result_free(r);
        memset(r, 0, sizeof *r);
        return 0;
    }
    if (rc)
        return cli_fail(&err);
    return 0;
}

/* The core whose recorded timeline stands for `core`: itself, or its
 * twin in replica 0 (same shard, same program) when large pods keep only
 * replica 0's events.  NULL when none was recorded. */
static const emu_core_result *timeline_of(const emu_result *r, int core)
{
    if (core < 0 || core >= r->cores)
        return NULL;
    const emu_core_result *pc = &r->per_core[core];
    if (pc->n_events)
        return pc;
    for (int c = 0; c < r->cores; c++)
        if (r->per_core[c].replica == 0 && r->per_core[c].shard == pc->shard &&
            r->per_core[c].n_events)
            return &r->per_core[c];
    return NULL;
}

/* The timed header: what the figures are, this core's step, the slowest
 * blocks. */
static void put_timed_head(const emu_result *r, int core,
                           const emu_core_result *pc, const block *bs,
                           size_t nb, double lost)
{
    const emu_core_result *me = &r->per_core[core];
    char b[32];
    printf("; timed (--timed): the step `tpuemu run` simulates with these "
           "options (%s, global batch %lld).\n",
           r->system, (long long)r->global_batch);
    printf(";   After each `; layer phase` comment, in [ ]: the time this "
           "core's critical path spent in\n"
           ";   that block, its share of the core's step, and the "
           "categories of the report (mxu, vector,\n"
           ";   hbm_stall, halo, allreduce, idle).  A layer's blocks sum to "
           "its entry in the report's\n"
           ";   layers[] (which holds core 0's); (step) blocks are %s.\n",
           r->train ? "the gradient all-reduce and the update"
                    : "the step's end (an inference step has no update)");
    chart_fmt_time(b, sizeof b, me->step_time_s, CHART_TIME_SIG_UNIT, 0);
    printf("; core %d: step %s", core, b);
    int first = 1;
    for (int k = 0; k < CAT_COUNT; k++) {
        if (me->breakdown_s[k] <= 0)
            continue;
        chart_fmt_time(b, sizeof b, me->breakdown_s[k], CHART_TIME_SIG_UNIT, 0);
        printf("%s %s %s", first ? " =" : ",", emu_cat_name((emu_cat)k), b);
        first = 0;
    }
    chart_fmt_time(b, sizeof b, r->step_time_s, CHART_TIME_SIG_UNIT, 0);
    printf("; the slowest core's: %s\n", b);
    if (pc != me)
        printf("; (its timeline is core %d's: same shard, same program, "
               "same times)\n", pc->core);
    /* the five blocks that took longest (the first of equals) */
    size_t top[5];
    int ntop = 0;
    for (; ntop < 5; ntop++) {
        size_t best = nb;
        for (size_t k = 0; k < nb; k++) {
            int taken = 0;
            for (int i = 0; i < ntop; i++)
                taken |= top[i] == k;
            if (!taken && sum_cats(bs[k].t) > 0 &&
                (best == nb || sum_cats(bs[k].t) > sum_cats(bs[best].t)))
                best = k;
        }
        if (best == nb)
            break;
        top[ntop] = best;
    }
    if (ntop) {
        fputs("; longest blocks:", stdout);
        for (int i = 0; i < ntop; i++) {
            const block *x = &bs[top[i]];
            double t = sum_cats(x->t);
            chart_fmt_time(b, sizeof b, t, CHART_TIME_SIG_UNIT, 0);
            printf("%s %s %s%s %s (%.3g%%)", i ? "," : "",
                   x->layer >= 0 ? r->layer_names[x->layer] : "(step)",
                   emu_phase_name((emu_phase)x->phase),
                   x->recompute ? " recompute" : "", b,
                   me->step_time_s > 0 ? 100 * t / me->step_time_s : 0);
        }
        putchar('\n');
    }
    if (lost > 0) {
        chart_fmt_time(b, sizeof b, lost, CHART_TIME_SIG_UNIT, 0);
        printf("; %s of the critical path matched no block\n", b);
    }
}

/* The command line of lower. */
typedef struct {
    const char *trace;
    int64_t core;
    int timed;
    cli_whatif w;
} lower_args;

/* 0, or 2 with the error printed. */
static int parse_lower_args(lower_args *la, int argc, char **argv)
{
    memset(la, 0, sizeof *la);
    cli_whatif_init(&la->w);
    const char *v;
    int took;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((took = cli_whatif_take(&la->w, argc, argv, &i)) != 0) {
            if (took < 0)
                return 2;
        } else if (strcmp(a, "--core") == 0) {
            if (!(v = cli_value(argc, argv, &i)) ||
                cli_int("--core", v, 0, 1 << 20, &la->core))
                return 2;
        } else if (strcmp(a, "--timed") == 0) {
            if (la->timed)
                return cli_error(2, "lower: --timed given twice");
            la->timed = 1;
        } else if (a[0] == '-' && a[1]) {
            return cli_error(2, "lower: unknown option %s (see tpuemu lower --help)", a);
        } else if (!la->trace) {
            la->trace = a;
        } else {
            return cli_error(2, "lower: more than one trace");
        }
    }
    if (!la->trace)
        return cli_error(2, "lower: no trace given (usage: tpuemu lower "
                            "TRACE.json [OPTIONS]; see tpuemu lower --help)");
    return cli_whatif_check(&la->w) ? 2 : 0;
}

/* The listing's head: program size, the core's HBM, what xla.remat
 * recomputes, the operand legend, and with --timed the core's step. */
static void put_head(const graph *g, int core, const fw_program *prog,
                     const fw_memory *mem, const emu_result *r,
                     const emu_core_result *pc, const block *bs, size_t nb,
                     double lost, int timed, const char *why)
{
    printf("; tpuemu firmware: %s, core %d, %zu instructions\n", g->name,
           core, prog->n);
    printf("; HBM: weights %.3g B, gradients %.3g B, optimizer %.3g B, "
           "saved activations %.3g B, workspace %.3g B, peak %.3g B\n",
           mem->weights_bytes, mem->grads_bytes, mem->opt_bytes,
           mem->saved_bytes, mem->workspace_bytes, mem->peak_bytes);
    if (mem->remat_layers > 0) {
        char by[32];
        fmt_bytes(by, sizeof by, mem->remat_bytes);
        printf("; recomputed (xla.remat): %d activation%s, %s, dropped from "
               "the saved set to fit HBM, each\n;   rebuilt by a vector pass "
               "before its first backward reader (\"recompute\" blocks)\n",
               mem->remat_layers, mem->remat_layers == 1 ? "" : "s", by);
    }
    fputs(legend, stdout);
    if (pc)
        put_timed_head(r, core, pc, bs, nb, lost);
    else if (timed)
        printf("; not timed: %s\n", why);
}

/* Every block: its comment line (timed when step_s > 0), then its
 * instructions, indented by loop depth. */
static void put_listing(const graph *g, const fw_program *prog,
                        const block *bs, size_t nb, int timed, double step_s)
{
    int depth = 0;
    char buf[256];
    for (size_t k = 0; k < nb; k++) {
        put_block_head(g, prog, bs, k, timed, step_s);
        for (size_t i = bs[k].first; i < bs[k].end; i++) {
            const fw_insn *in = &prog->code[i];
            if (in->op == FW_ENDLOOP)
                depth--;
            fw_format(in, buf, sizeof buf);
            printf("%*s%s%s\n", 4 + 4 * depth, "", buf,
                   in->op == FW_ALLGATHER
                       ? "  ; the whole tensor: the window reaches past the "
                         "neighbours' rows (or the output is not split); "
                         "the report files it under halo"
                       : "");
            if (in->op == FW_LOOP)
                depth++;
        }
    }
}

/* --timed: the step run as `run` runs it, and this core's timeline
 * charged to the blocks.  0 (with *pc NULL and why said when there is
 * no timeline), or an exit status with the error printed. */
static int time_blocks(const graph *g, const sim_opts *o, int core,
                       emu_result *r, block *bs, size_t nb,
                       const emu_core_result **pc, double *lost, char *why,
                       size_t cap)
{
    int code = time_step(g, o, r, why, cap);
    if (code)
        return code;
    if (!why[0] && !(*pc = timeline_of(r, core)))
        snprintf(why, cap, "no timeline was recorded for core %d", core);
    if (*pc)
        *lost = charge_events(bs, nb, *pc);
    return 0;
}

int cli_lower(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        cli_whatif_usage(stdout);
        fputs(usage_tail, stdout);
        return 0;
    }
    lower_args la;
    int code = parse_lower_args(&la, argc, argv);
    if (code)
        return code;
    sim_opts o;
    sim_opts_default(&o);
    o.trace_path = la.trace;
    tpu_error err = {0};
    graph g;
    if (graph_load(&g, la.trace, &err))
        return cli_fail(&err);
    if ((code = cli_whatif_apply(&la.w, &g, la.trace, &o)) != 0) {
        graph_free(&g);
        return code;
    }
    const int core = (int)la.core;
    fw_program prog;
    fw_memory mem;
    fw_program_init(&prog);
    tpu_status rc = sim_lower(&g, &o, core, &prog, &mem, &err);
    /* A step that does not fit is still printed (what would need the
     * memory), then refused as run refuses it. */
    if (rc && rc != TPU_ERR_NOFIT) {
        graph_free(&g);
        return cli_fail(&err);
    }
    size_t nb = 0;
    block *bs = find_blocks(&prog, &nb);
    if (!bs) {
        fw_program_free(&prog);
        graph_free(&g);
        return cli_error(4, "out of host memory (listing)");
    }
    emu_result r;
    memset(&r, 0, sizeof r);
    char why[1200] = "";
    const emu_core_result *pc = NULL;
    double lost = 0;
    if (la.timed && rc)
        snprintf(why, sizeof why, "the step does not fit (exit 3 below)");
    else if (la.timed)
        code = time_blocks(&g, &o, core, &r, bs, nb, &pc, &lost, why,
                           sizeof why);
    if (!code) {
        put_head(&g, core, &prog, &mem, &r, pc, bs, nb, lost, la.timed, why);
        put_listing(&g, &prog, bs, nb, pc != NULL,
                    pc ? r.per_core[core].step_time_s : 0);
    }
    free(bs);
    emu_result_free(&r);
    fw_program_free(&prog);
    graph_free(&g);
    if (code)
        return code;
    return rc ? cli_fail(&err) : 0;
}
