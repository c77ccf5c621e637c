/* Dependencies run one way (scripts/check_layers.sh holds the layers and
 * why): the tree passes the check, and the check fails, naming the file,
 * the include and both layers, on a tree where a lower layer includes a
 * higher one or a file belongs to no layer. */
#include <stdio.h>
#include <string.h>

#include "test/harness.h"

/* A small tree under the test's temporary directory: `files` pairs of
 * path and text, NULL-terminated.  Its root in dir[cap]. */
static void make_tree(const char *name, const char *const *files, char *dir,
                      size_t cap)
{
    th_cmd_result r;
    snprintf(dir, cap, "%s/%s", th_tmpdir(), name);
    th_run(&r, "rm -rf %s && mkdir -p %s/emu %s/mxu %s/foo", dir, dir, dir,
           dir);
    for (int k = 0; files[k]; k += 2) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, files[k]);
        th_put(path, files[k + 1]);
    }
}

void th_suite_layers(th_ctx *t)
{
    static th_cmd_result r;
    char dir[300];

    th_case(t, "the tree is layered");
    th_run(&r, "sh scripts/check_layers.sh");
    TH_CHECKF(t, r.status == 0, "scripts/check_layers.sh exits %d:\n%s%s",
              r.status, r.out, r.err);

    th_case(t, "a higher layer including a lower one passes");
    {
        static const char *const ok[] = {
            "emu/engine.h", "#include \"mxu/mxu.h\"\n",
            "mxu/mxu.h", "#include \"emu/status.h\"\n",
            NULL};
        make_tree("layers-ok", ok, dir, sizeof dir);
        th_run(&r, "sh scripts/check_layers.sh %s", dir);
        TH_CHECKF(t, r.status == 0, "exits %d:\n%s", r.status, r.out);
    }

    th_case(t, "a lower layer including a higher one fails, named");
    {
        static const char *const up[] = {
            "mxu/mxu.h", "#include <stdint.h>\n#include \"emu/engine.h\"\n",
            "emu/engine.h", "int engine_x;\n",
            NULL};
        make_tree("layers-up", up, dir, sizeof dir);
        th_run(&r, "sh scripts/check_layers.sh %s", dir);
        TH_CHECKF(t, r.status != 0, "exits 0 on mxu/ including emu/engine");
        TH_CHECKF(t, strstr(r.out, "mxu/mxu.h:2:") &&
                         strstr(r.out, "\"emu/engine.h\"") &&
                         strstr(r.out, "hardware") &&
                         strstr(r.out, "execution"),
                  "does not name the file, include and layers:\n%s", r.out);
    }

    th_case(t, "a file in no layer fails, named");
    {
        static const char *const stray[] = {
            "foo/new.c", "int x;\n",
            NULL};
        make_tree("layers-stray", stray, dir, sizeof dir);
        th_run(&r, "sh scripts/check_layers.sh %s", dir);
        TH_CHECKF(t, r.status != 0 && strstr(r.out, "foo/new.c") &&
                         strstr(r.out, "no layer"),
                  "exits %d:\n%s", r.status, r.out);
    }
}
