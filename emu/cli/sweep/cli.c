/* tpuemu sweep --trace: the command-line form of a sweep
 * (emu/cli/sweep/sweep.h).
 *
 * "How should I partition my model, on how many cores?" is the first
 * question a user asks, and it should not need a second file format.
 * The options stand for one sweep file,
 *
 *   {"format": "tpuemu-sweep/1", "name": STEM, "trace": TRACE,
 *    "grid": {"partition_dims": "all", "system": [...], "batch": [...],
 *             "freeze": [LIST], "set": {KEY: [...], ...}}}
 *
 * built as JSON text and parsed by the sweep file's own parser, so every
 * check, limit and message is the file's: the two forms cannot drift.
 * The text is written to OUT/sweep.json for the user to re-run, edit or
 * --gather.  Only the messages differ: where the file form names a JSON
 * path of a file the user never wrote ("grid.system[1]"), this one names
 * the option and the value ("--system v3-65"): the parser words every
 * error through the sweep's namer (sweep_bad), and this form's namer is
 * cli_say. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"
#include "emu/report.h"

/* What the in-memory sweep is called (no '/': a relative trace is then
 * relative to the working directory, as the user typed it). */
#define CLI_MARK "(sweep --trace)"

static const char file_desc[] =
    "Written by `tpuemu sweep --trace`: every split of the trace's first "
    "input (\"partition_dims\": \"all\") on the systems, batches and "
    "--set values given. `tpuemu sweep THIS.json --out DIR` runs it again "
    "(add --gather to read reports the printed commands wrote).";

static const char file_desc_one[] =
    "Written by `tpuemu sweep --trace --partition`: the one split of the "
    "trace's first input given, on the systems, batches and --set values "
    "given. `tpuemu sweep THIS.json --out DIR` runs it again (add --gather "
    "to read reports the printed commands wrote).";

int sweep_cli_take(sweep_cli *c, int argc, char **argv, int *i)
{
    static const char *const names[] = {"--trace", "--system", "--batch",
                                        "--freeze", "--partition"};
    const char **slots[] = {&c->trace, &c->system, &c->batch, &c->freeze,
                            &c->partition};
    const char *a = argv[*i];
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        if (strcmp(a, names[k]) != 0)
            continue;
        if (!(*slots[k] = cli_value(argc, argv, i)))
            return -1;
        int dims[GRAPH_MAX_PDIMS], n;
        if (slots[k] == &c->partition &&
            cli_partition_parse(c->partition, dims, &n))
            return -1;
        if (k > 0 && !c->first)
            c->first = names[k];
        return 1;
    }
    if (strcmp(a, "--set") != 0)
        return 0;
    const char *v = cli_value(argc, argv, i);
    if (!v)
        return -1;
    if (c->nsets == SWEEP_CLI_MAX_SETS) {
        cli_error(2, "--set: at most %d keys", SWEEP_CLI_MAX_SETS);
        return -1;
    }
    c->sets[c->nsets++] = v;
    if (!c->first)
        c->first = "--set";
    return 1;
}

/* ---- the sweep file the options stand for ------------------------------ */

/* Entry i of the comma-separated list (NULL past the end) into buf. */
static const char *list_item(const char *list, int i, char *buf, size_t cap)
{
    const char *p = list;
    for (; i > 0; i--) {
        p = strchr(p, ',');
        if (!p)
            return NULL;
        p++;
    }
    size_t n = strcspn(p, ",");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return buf;
}

/* The values of a --set: what follows "KEY=". */
static const char *set_values(const char *kv)
{
    const char *eq = strchr(kv, '=');
    return eq ? eq + 1 : "";
}

/* An empty entry is the list's own syntax, not a value to check: refused
 * here, naming the option. */
static int check_list(const char *opt, const char *shown_opt,
                      const char *list)
{
    size_t len = strlen(list);
    int empty = len == 0 || list[0] == ',' || list[len - 1] == ',' ||
                strstr(list, ",,") != NULL;
    if (!empty)
        return 0;
    char q[300];
    cli_shown(q, sizeof q, list);
    return cli_error(2, "%s: '%s': an empty entry (expected %s)", shown_opt,
                     q, opt);
}

/* --set KEY=V1,V2, each key once. */
static int check_sets(const sweep_cli *c)
{
    for (int i = 0; i < c->nsets; i++) {
        const char *kv = c->sets[i], *eq = strchr(kv, '=');
        char q[300];
        cli_shown(q, sizeof q, kv);
        if (!eq || eq == kv)
            return cli_error(2, "--set %s: expected KEY=VALUE[,VALUE...]",
                             q);
        size_t kl = (size_t)(eq - kv);
        char opt[120];
        snprintf(opt, sizeof opt, "--set %.*s", (int)(kl < 64 ? kl : 64), kv);
        int rc = check_list("KEY=VALUE[,VALUE...]", opt, eq + 1);
        if (rc)
            return rc;
        for (int j = 0; j < i; j++)
            if (strncmp(c->sets[j], kv, kl + 1) == 0)
                return cli_error(2, "%s: given twice (the values of one key "
                                    "are one list: --set KEY=V1,V2)",
                                 opt);
    }
    return 0;
}

/* A value as the file would hold it: a number when it reads as one (a
 * hand-written file says 450, not "450", and the sweep then labels and
 * places it the same), else the text, for the file's check to refuse. */
static cJSON *value_json(const char *v, int numeric)
{
    double d;
    if (numeric && cli_number(v, &d) && isfinite(d))
        return cJSON_CreateNumber(d);
    return cJSON_CreateString(v);
}

/* The comma-separated list as a JSON array; NULL when out of memory. */
static cJSON *list_json(const char *list, int numeric)
{
    cJSON *arr = cJSON_CreateArray();
    char item[1024];
    for (int i = 0; arr && list_item(list, i, item, sizeof item); i++) {
        cJSON *v = value_json(item, numeric);
        if (!v || !cJSON_AddItemToArray(arr, v)) {
            cJSON_Delete(v);
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

/* The sweep's name: the trace file's stem, in the letters a sweep name
 * may have (the default --out is then sweep-STEM, as the partitionings'
 * traces are STEM-pdAxB.json). */
static void stem_name(const char *trace, char *buf, size_t cap)
{
    const char *base = strrchr(trace, '/');
    base = base ? base + 1 : trace;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".json") == 0)
        n -= 5;
    if (n > 100)
        n = 100;
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        unsigned char ch = (unsigned char)base[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
                 (ch == '.' && k > 0);
        buf[k++] = ok ? (char)ch : '_';
    }
    buf[k] = 0;
    if (!k)
        snprintf(buf, cap, "trace");
}

static int add(cJSON *obj, const char *key, cJSON *item)
{
    if (item && cJSON_AddItemToObject(obj, key, item))
        return 0;
    cJSON_Delete(item);
    return -1;
}

/* The sweep file's document, its "trace" as given; NULL when out of
 * memory. */
static cJSON *sweep_doc(const sweep_cli *c, const char *trace)
{
    char name[128];
    stem_name(c->trace, name, sizeof name);
    cJSON *doc = cJSON_CreateObject(), *grid = cJSON_CreateObject();
    int bad = !doc || !grid;
    bad = bad || add(doc, "format", cJSON_CreateString("tpuemu-sweep/1"));
    bad = bad || add(doc, "name", cJSON_CreateString(name));
    bad = bad || add(doc, "description",
                     cJSON_CreateString(c->partition ? file_desc_one
                                                     : file_desc));
    bad = bad || add(doc, "trace", cJSON_CreateString(trace));
    if (c->partition) { /* one split (the values parse: sweep_cli_take) */
        int dims[GRAPH_MAX_PDIMS], n = 0;
        cli_partition_parse(c->partition, dims, &n);
        cJSON *one = cJSON_CreateArray();
        bad = bad || add(grid, "partition_dims", one);
        cJSON *d = bad ? NULL : cJSON_CreateIntArray(dims, n);
        if (!bad && (!d || !cJSON_AddItemToArray(one, d))) {
            cJSON_Delete(d);
            bad = 1;
        }
    } else {
        bad = bad || add(grid, "partition_dims", cJSON_CreateString("all"));
    }
    if (!bad && c->system)
        bad = add(grid, "system", list_json(c->system, 0));
    if (!bad && c->batch)
        bad = add(grid, "batch", list_json(c->batch, 1));
    if (!bad && c->freeze) {
        cJSON *f = cJSON_CreateArray();
        bad = add(grid, "freeze", f);
        cJSON *v = bad ? NULL : cJSON_CreateString(c->freeze);
        if (!bad && (!v || !cJSON_AddItemToArray(f, v))) {
            cJSON_Delete(v);
            bad = 1;
        }
    }
    if (!bad && c->nsets) {
        cJSON *set = cJSON_CreateObject();
        bad = add(grid, "set", set);
        for (int i = 0; !bad && i < c->nsets; i++) {
            const char *kv = c->sets[i], *eq = strchr(kv, '=');
            char key[1024];
            snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv);
            bad = add(set, key, list_json(eq + 1, 1));
        }
    }
    if (!bad) {
        bad = add(doc, "grid", grid);
        grid = NULL; /* doc's, or freed by add */
    }
    cJSON_Delete(grid);
    if (bad) {
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

/* The document as the file's text, ending in a newline; NULL when out of
 * memory. */
static char *sweep_text(const sweep_cli *c, const char *trace)
{
    cJSON *doc = sweep_doc(c, trace);
    char *t = doc ? cli_json_text(doc) : NULL;
    cJSON_Delete(doc);
    return t;
}

/* ---- the file's messages in the options' words -------------------------- */

/* A value as the message shows it: quoted when spaces at its ends would
 * otherwise be invisible ("--system ' v3-8'"). */
static void shown_value(char *buf, size_t cap, const char *v)
{
    size_t n = strlen(v);
    char q[1024];
    cli_shown(q, sizeof q, v);
    if (n && (v[0] == ' ' || v[n - 1] == ' '))
        snprintf(buf, cap, "'%s'", q);
    else
        snprintf(buf, cap, "%s", q);
}

/* The option (and value) that JSON path jp of the built file stands for. */
static void option_for(const sweep_cli *c, const char *jp, char *buf,
                       size_t cap)
{
    const char *br = strchr(jp, '[');
    int idx = br ? atoi(br + 1) : -1;
    size_t base = br ? (size_t)(br - jp) : strlen(jp);
    char item[1024], q[1100];
    const char *opt = NULL, *list = NULL;
    if (strncmp(jp, "grid.system", base) == 0 && base == 11) {
        opt = "--system";
        list = c->system;
    } else if (strncmp(jp, "grid.batch", base) == 0 && base == 10) {
        opt = "--batch";
        list = c->batch;
    } else if (strncmp(jp, "grid.freeze", base) == 0 && base == 11) {
        snprintf(buf, cap, "--freeze");
        return;
    } else if (strncmp(jp, "grid.set.", 9) == 0 && base > 9) {
        const char *key = jp + 9;
        size_t kl = base - 9;
        for (int i = 0; i < c->nsets; i++)
            if (strncmp(c->sets[i], key, kl) == 0 && c->sets[i][kl] == '=') {
                if (idx >= 0 &&
                    list_item(set_values(c->sets[i]), idx, item, sizeof item)) {
                    shown_value(q, sizeof q, item);
                    snprintf(buf, cap, "--set %.*s=%s", (int)kl, key, q);
                } else
                    snprintf(buf, cap, "--set %.*s", (int)kl, key);
                return;
            }
        snprintf(buf, cap, "--set %.*s", (int)kl, key);
        return;
    } else if (strncmp(jp, "grid.partition_dims", 19) == 0 &&
               c->partition) {
        shown_value(q, sizeof q, c->partition);
        snprintf(buf, cap, "--partition %s", q);
        return;
    } else if (strcmp(jp, "trace") == 0 ||
               strncmp(jp, "grid.partition_dims", 19) == 0) {
        /* the splits "all" finds are the trace's */
        snprintf(buf, cap, "--trace");
        return;
    } else {
        snprintf(buf, cap, "sweep");
        return;
    }
    if (idx >= 0 && list && list_item(list, idx, item, sizeof item)) {
        shown_value(q, sizeof q, item);
        snprintf(buf, cap, "%s %s", opt, q);
    } else
        snprintf(buf, cap, "%s", opt);
}

/* How much of what to show: all but a closing " (value V)" when opt
 * shows V already ("--set mxu.rows=0: out of range [1, 4096]"). */
static size_t said_len(const char *opt, const char *what)
{
    const char *eq = strchr(opt, '=');
    size_t wl = strlen(what), vl = eq ? strlen(eq + 1) : 0;
    if (eq && wl > vl + 9 && strcmp(what + wl - 1, ")") == 0 &&
        strncmp(what + wl - vl - 9, " (value ", 8) == 0 &&
        strncmp(what + wl - vl - 1, eq + 1, vl) == 0)
        wl -= vl + 9;
    return wl;
}

/* The parser's message `what` about JSON path jpath of the built file, in
 * the options' words: the option (and value) for the path, then what. */
static void cli_say(const sweep_namer *n, const char *jpath,
                    const char *what, char *buf, size_t cap)
{
    const sweep_cli *c = n->ctx;
    char opt[1300];
    option_for(c, jpath ? jpath : "", opt, sizeof opt);
    size_t wl = said_len(opt, what), ol = strcspn(opt, " ");
    /* "--freeze: no layer named ..." names its option already */
    if (strncmp(what, opt, ol) == 0 && (what[ol] == ':' || what[ol] == ' '))
        snprintf(buf, cap, "%.*s", (int)wl, what);
    else
        snprintf(buf, cap, "%s%s%.*s", opt, wl ? ": " : "", (int)wl, what);
}

/* Each --batch value by run's rule (a whole number: "1e3" is refused
 * there, and the sweep's runs are run's), not the file's JSON number. */
static int check_batches(const char *list)
{
    char item[1024], q[1100];
    for (int i = 0; list_item(list, i, item, sizeof item); i++) {
        size_t n = strspn(item, "0123456789");
        if (n > 0 && item[n] == 0 && n <= 7 && atol(item) >= 1 &&
            atol(item) <= (1L << 20))
            continue;
        shown_value(q, sizeof q, item);
        return cli_error(2, "--batch %s: expected a positive integer up to "
                            "%ld, as run --batch takes",
                         q, 1L << 20);
    }
    return 0;
}

/* The sweep reads its base trace more than once (the grid's checks, then
 * each split's variant), so a pipe or FIFO would be empty the second
 * time ("changed while being read"): refused at once
 * with what to do.  A missing or unreadable file is left to the sweep
 * file's own check, which names it. */
static int check_trace_file(const char *trace)
{
    struct stat st;
    if (strcmp(trace, "-") != 0 && (stat(trace, &st) != 0 ||
                                    S_ISREG(st.st_mode)))
        return 0;
    char q[1100];
    cli_shown(q, sizeof q, trace);
    return cli_error(2, "--trace %s: the sweep reads its trace once per "
                        "split, so it must be a regular file, not %s (save "
                        "it first: CMD > trace.json)",
                     q, strcmp(trace, "-") == 0 ? "standard input"
                                                : "a pipe, FIFO or device");
}

int sweep_cli_parse(sweep *s, const sweep_cli *c)
{
    memset(s, 0, sizeof *s);
    int rc = 0;
    if (c->system)
        rc = check_list("NAME[,NAME...]", "--system", c->system);
    if (!rc && c->batch)
        rc = check_list("N[,N...]", "--batch", c->batch);
    if (!rc && c->batch)
        rc = check_batches(c->batch);
    if (!rc)
        rc = check_trace_file(c->trace);
    if (!rc)
        rc = check_sets(c);
    if (rc)
        return rc;
    char *text = sweep_text(c, c->trace);
    if (!text)
        return cli_error(4, "out of memory");
    /* "all" is not typed here: the splits are the trace's */
    const sweep_namer namer = {cli_say, c, "",
                               "give other --system or --batch values"};
    rc = sweep_parse_text(s, CLI_MARK, &namer, text, strlen(text));
    free(text);
    return rc;
}

void sweep_cli_file(const char *out, char *buf, size_t cap)
{
    sweep_out_path(buf, cap, out, "sweep.json");
}

int sweep_cli_write(const sweep *s, const sweep_cli *c, const char *out)
{
    char *text = sweep_text(c, s->trace);
    if (!text)
        return cli_error(4, "out of memory");
    char path[1100];
    tpu_error err = {0};
    sweep_cli_file(out, path, sizeof path);
    int rc = tpu_write_atomic(path, text, strlen(text), &err) ? cli_fail(&err)
                                                             : 0;
    free(text);
    return rc;
}
