/* tpuemu lower: print one core's firmware program. */
#include <stdio.h>
#include <string.h>

#include "emu/cli.h"
#include "emu/graph.h"
#include "emu/result.h"
#include "emu/sim.h"

static const char usage[] =
    "usage: tpuemu lower TRACE.json [--core N] [--system NAME] [--batch N]\n"
    "                   [--set KEY=VALUE ...] [--freeze LIST]\n"
    "\n"
    "Prints the firmware program of one core (default 0) in tpuemu's\n"
    "assembler syntax: one instruction a line, `; layer phase` comments,\n"
    "loops indented.  firmware/isa.h documents every opcode.  The what-if\n"
    "options are run's: --set xla.* switches change the program.\n"
    "\n"
    "  --core N        the core whose program is printed (default 0)\n";

static const char usage_tail[] =
    "\n"
    "exit status: 0 done, 2 bad input or usage (standard output that\n"
    "cannot be written included), 3 does not fit the hardware (the\n"
    "program is still printed whole: what the core would run),\n"
    "4 out of host memory\n";

int cli_lower(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        cli_whatif_usage(stdout);
        fputs(usage_tail, stdout);
        return 0;
    }
    const char *trace = NULL, *v;
    int64_t core = 0;
    int took;
    cli_whatif w;
    cli_whatif_init(&w);
    sim_opts o;
    sim_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((took = cli_whatif_take(&w, argc, argv, &i)) != 0) {
            if (took < 0)
                return 2;
        } else if (strcmp(a, "--core") == 0) {
            if (!(v = cli_value(argc, argv, &i)) ||
                cli_int("--core", v, 0, 1 << 20, &core))
                return 2;
        } else if (a[0] == '-' && a[1]) {
            return cli_error(2, "lower: unknown option %s (see tpuemu lower --help)", a);
        } else if (!trace) {
            trace = a;
        } else {
            return cli_error(2, "lower: more than one trace");
        }
    }
    if (!trace)
        return cli_error(2, "lower: no trace given (usage: tpuemu lower "
                            "TRACE.json [OPTIONS]; see tpuemu lower --help)");
    if (cli_whatif_check(&w))
        return 2;
    o.trace_path = trace;
    tpu_error err = {0};
    graph g;
    if (graph_load(&g, trace, &err))
        return cli_fail(&err);
    int code = cli_whatif_apply(&w, &g, trace, &o);
    if (code) {
        graph_free(&g);
        return code;
    }
    fw_program prog;
    fw_memory mem;
    fw_program_init(&prog);
    tpu_status rc = sim_lower(&g, &o, (int)core, &prog, &mem, &err);
    /* A step that does not fit is still printed (what would need the
     * memory), then refused as run refuses it. */
    if (rc && rc != TPU_ERR_NOFIT) {
        graph_free(&g);
        return cli_fail(&err);
    }
    printf("; tpuemu firmware: %s, core %d, %zu instructions\n", g.name,
           (int)core, prog.n);
    printf("; HBM: weights %.3g B, gradients %.3g B, optimizer %.3g B, "
           "saved activations %.3g B, workspace %.3g B, peak %.3g B\n",
           mem.weights_bytes, mem.grads_bytes, mem.opt_bytes, mem.saved_bytes,
           mem.workspace_bytes, mem.peak_bytes);
    int depth = 0, last_layer = -2, last_phase = -1;
    char buf[256];
    for (size_t i = 0; i < prog.n; i++) {
        const fw_insn *in = &prog.code[i];
        if (in->layer != last_layer || in->phase != last_phase) {
            printf("\n; %s %s%s\n",
                   in->layer >= 0 ? g.layers[in->layer].name : "(step)",
                   emu_phase_name((emu_phase)in->phase),
                   in->layer >= 0 && g.layers[in->layer].frozen
                       ? " (frozen)"
                       : "");
            last_layer = in->layer;
            last_phase = in->phase;
        }
        if (in->op == FW_ENDLOOP)
            depth--;
        fw_format(in, buf, sizeof buf);
        printf("%*s%s\n", 4 + 4 * depth, "", buf);
        if (in->op == FW_LOOP)
            depth++;
    }
    fw_program_free(&prog);
    graph_free(&g);
    return rc ? cli_fail(&err) : 0;
}
