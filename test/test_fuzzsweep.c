/* Sweep files the fuzzer (test/fuzz/fuzz_sweep.c, `make fuzz-sweep`) found
 * hard for the parser, each minimised input replayed through `tpuemu sweep FILE
 * --print-commands`: exit 2, one error line naming the file and the JSON
 * path, the output directory not created.  The base traces sit next to
 * each sweep file under the names the fuzzer's directory gives them
 * (t.json is traces/small/tiny2d.json, t3b.json tiny3d-p4 at batch 2). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "test/harness.h"

#define SW "\"format\": \"tpuemu-sweep/1\", \"name\": \"fz\", "

typedef struct {
    const char *what;  /* the case, and what a careless parser does with it */
    const char *text;  /* the sweep file */
    const char *jpath; /* "FILE: " then this starts the message */
    const char *says;  /* and the message says this */
} finding;

static const finding findings[] = {
    /* fuzz_sweep: "\u0000trace" is the key "" to cJSON, named as an empty
     * path ("SWEEP.json: : unknown key") */
    {"an empty key is named \"\"", "{\"\":0}\n", "\"\": ",
     "unknown key"},
    {"a key with \\u0000 is named \"\"",
     "{" SW "\"\\u0000trace\": \"t.json\", \"grid\": {\"batch\": [8]}}\n",
     "\"\": ", "unknown key"},
    {"an empty axis name is named grid.\"\"",
     "{" SW "\"trace\": \"t.json\", \"grid\": {\"\": [1]}}\n", "grid.\"\": ",
     "unknown axis"},
    {"an axis name with ': ' is quoted",
     "{" SW "\"trace\": \"t.json\", \"grid\": {\"a: b\": [1]}}\n",
     "grid.\"a: b\": ", "unknown axis"},
    {"an empty --set key is named grid.set.\"\"",
     "{" SW "\"trace\": \"t.json\", \"grid\": {\"set\": {\"\": [1]}}}\n",
     "grid.set.\"\": ", "expected a parameter key"},
    {"a duplicate empty key is named grid.\"\"",
     "{" SW "\"trace\": \"t.json\", \"grid\": {\"\": [1], \"\": [2]}}\n",
     "grid.\"\": ", "duplicate key"},
    /* a system scale_batch cannot scale to, under "all": was blamed on
     * "all" at "batch 0" after four notes of splits dropped at batch 0 */
    {"scale_batch to a system with no whole batch, with \"all\"",
     "{" SW "\"trace\": \"t3b.json\", \"scale_batch\": true, \"grid\": "
     "{\"partition_dims\": \"all\", \"system\": [\"v3-2\", \"v3-8\"]}}\n",
     "grid.system[0]: ", "not a whole batch"},
    /* not to be charted on the first axis as if absent */
    {"an empty x", "{" SW "\"trace\": \"t.json\", \"grid\": {\"batch\": "
                   "[8, 16]}, \"x\": \"\"}\n",
     "x: ", "expected the name of a grid axis"},
    /* sweep_parse_text read past the end of text with no NUL after it
     * (strspn); the file reader adds a NUL, so the CLI shows only that
     * white space alone is still an empty file */
    {"white space only", " \n\t\r\n ", "empty file", ""},
};

/* Exactly one line on stderr, "tpuemu: error: FILE: JPATH..." saying
 * `says`, and nothing else. */
static void check_refusal(th_ctx *t, const th_cmd_result *c, const char *file,
                          const finding *f)
{
    char want[1024];
    snprintf(want, sizeof want, "tpuemu: error: %s: %s", file, f->jpath);
    TH_CHECKF(t, c->status == 2, "%s: exit %d, expected 2", f->what,
              c->status);
    TH_CHECKF(t, strncmp(c->err, want, strlen(want)) == 0,
              "%s: stderr '%s', expected it to start '%s'", f->what, c->err,
              want);
    TH_CHECKF(t, strstr(c->err, f->says) != NULL, "%s: '%s' lacks '%s'",
              f->what, c->err, f->says);
    const char *nl = strchr(c->err, '\n');
    TH_CHECKF(t, nl && nl[1] == 0, "%s: not one line: '%s'", f->what,
              c->err);
    TH_CHECKF(t, c->out[0] == 0, "%s: printed commands: '%s'", f->what,
              c->out);
}

void th_suite_fuzzsweep(th_ctx *t)
{
    char dir[600], file[700], out[700];
    th_cmd_result c;
    snprintf(dir, sizeof dir, "%s/fuzzsweep", th_tmpdir());
    th_run(&c, "mkdir -p %s && cp traces/small/tiny2d.json %s/t.json && "
               "sed 's/\"global_batch\": 4/\"global_batch\": 2/' "
               "traces/small/tiny3d-p4.json > %s/t3b.json",
           dir, dir, dir);
    if (!TH_CHECKF(t, c.status == 0, "set-up: %s", c.err))
        return;

    th_case(t, "fuzz_sweep findings: exit 2, file and JSON path, no output");
    for (size_t i = 0; i < sizeof findings / sizeof findings[0]; i++) {
        const finding *f = &findings[i];
        snprintf(file, sizeof file, "%s/f%zu.json", dir, i);
        snprintf(out, sizeof out, "%s/out%zu", dir, i);
        th_put(file, f->text);
        th_run(&c, "%s sweep %s --print-commands --out %s", th_bin(), file,
               out);
        check_refusal(t, &c, file, f);
        struct stat st;
        TH_CHECKF(t, stat(out, &st) != 0, "%s: %s was created", f->what,
                  out);
    }

    /* The fixes refuse nothing good: the same sweeps, corrected, print
     * their commands (scale_batch over slices it scales to, plain keys
     * unquoted). */
    th_case(t, "the corrected sweeps are accepted");
    {
        static const struct {
            const char *text;
            const char *has;
        } ok[] = {
            {"{" SW "\"trace\": \"t3b.json\", \"scale_batch\": true, "
             "\"grid\": {\"partition_dims\": \"all\", \"system\": "
             "[\"v3-8\", \"v3-32\"]}, \"x\": \"system\"}\n",
             "--system v3-32 --batch 8"},
            {"{" SW "\"trace\": \"t.json\", \"grid\": {\"batch\": [8, 16], "
             "\"set\": {\"mxu.rows\": [128, 256]}}, \"x\": \"batch\"}\n  \n",
             "--set mxu.rows=256"},
        };
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            snprintf(file, sizeof file, "%s/ok%zu.json", dir, i);
            snprintf(out, sizeof out, "%s/ok-out%zu", dir, i);
            th_put(file, ok[i].text);
            th_run(&c, "%s sweep %s --print-commands --out %s", th_bin(),
                   file, out);
            TH_CHECKF(t, c.status == 0 && strstr(c.out, ok[i].has),
                      "ok%zu: exit %d, stdout '%.300s', stderr '%s'", i,
                      c.status, c.out, c.err);
        }
    }
}
