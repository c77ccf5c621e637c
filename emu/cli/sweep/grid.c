/* tpuemu sweep: the grid (emu/cli/sweep/sweep.h).  "partition_dims": "all"
 * expanded into the splits valid on some system and batch of the grid
 * (each run only where it is valid);
 * each partitioning's trace (the base trace with its run section
 * changed); and every grid point checked as `run` checks it (--set values
 * alone and together, system, batch and partitioning), before anything is
 * written or run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/cli/cli.h"
#include "emu/cli/sweep/sweep.h"
#include "emu/params.h"
#include "emu/report.h"

/* The layer index of the first input. */
static int first_input(const graph *g)
{
    for (int l = 0; l < g->n_layers; l++)
        if (g->layers[l].op == GOP_INPUT)
            return l;
    return -1;
}

/* The full input_partition_dims for simple dims d (the first input's
 * split): each input keeps the base trace's choice (docs/SWEEPS.md).
 * The first input takes d whatever its entry (null included: it is the
 * input being swept; a d of the wrong rank is then refused by the reader
 * with its own message instead of silently running unsplit).  With a list
 * in the base trace, another input's null (replicated) stays null and a
 * list (the reader accepts only the first's list there, or all ones at one
 * core per replica) takes d when of d's rank.  Without a list (absent or
 * null), the base trace chose nothing per input: every input of d's rank
 * takes d, as the reader's pre-replication behaviour did (a null there
 * would change the base trace's work, not only its partitioning).
 * Inputs of another rank (nothing of d to split) stay null; the labels
 * take d if the base trace lists them with d's rank, else null.  NULL
 * with a message when out of memory. */
cJSON *sweep_pd_from_simple(const sweep *s, const cJSON *d, int rank,
                            char *why, size_t cap)
{
    return sweep_pd_for(s->base, &s->g, d, rank, why, cap);
}

cJSON *sweep_pd_for(const cJSON *base, const graph *g, const cJSON *d,
                    int rank, char *why, size_t cap)
{
    const cJSON *run = cJSON_GetObjectItemCaseSensitive(base, "run");
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(run,
                                                        "input_partition_dims");
    cJSON *out = cJSON_CreateArray();
    if (!out) {
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    int k = 0;
    if (!cJSON_IsArray(old) || cJSON_GetArraySize(old) == 0) {
        for (int l = 0; l < g->n_layers; l++) {
            const glayer *L = &g->layers[l];
            if (L->op != GOP_INPUT)
                continue;
            cJSON_AddItemToArray(out, k++ == 0 || L->out.nsp + 2 == rank
                                          ? cJSON_Duplicate(d, 1)
                                          : cJSON_CreateNull());
        }
        cJSON_AddItemToArray(out, cJSON_CreateNull()); /* the labels */
        return out;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, old)
    {
        int takes = k++ == 0 ||
                    (cJSON_IsArray(e) && cJSON_GetArraySize(e) == rank);
        cJSON_AddItemToArray(out, takes ? cJSON_Duplicate(d, 1)
                                        : cJSON_CreateNull());
    }
    return out;
}

/* Whether the full partition dims pd split every input no finer than its
 * extents (the check the trace reader applies to the variant). */
static int pd_fits_inputs(const sweep *s, const cJSON *pd)
{
    int k = 0;
    for (int l = 0; l < s->g.n_layers; l++) {
        const glayer *L = &s->g.layers[l];
        if (L->op != GOP_INPUT)
            continue;
        const cJSON *e = cJSON_GetArrayItem(pd, k++);
        for (int dd = 0; cJSON_IsArray(e) && dd < L->out.nsp; dd++) {
            const cJSON *f = cJSON_GetArrayItem(e, 1 + dd);
            if (cJSON_IsNumber(f) && f->valuedouble > (double)L->out.sp[dd])
                return 0;
        }
    }
    return 1;
}

/* ---- "partition_dims": "all" ------------------------------------------ */

/* What "all" left out on one system x batch pair: the splits valid on
 * other pairs only, the first few by name, and why the first is not valid
 * here. */
typedef struct {
    int n;
    char names[SWEEP_ALL_SHOW_DROPPED][48];
    char why[300];
} all_drops;

/* The search for "all": the grid's systems and batches (each list, or
 * NULL for the base trace's), and what the search has found so far. */
typedef struct {
    sweep *s;
    const cJSON *sys, *bat;
    int ncombo;      /* system x batch pairs */
    int nsp;         /* spatial dimensions of the first input */
    const gshape *sh;
    int *combo_ok;   /* per pair: how many kept splits are valid on it */
    int ndropped;    /* kept splits valid on some pairs only */
    unsigned char *cur; /* per pair: the split being tried is valid */
    unsigned char *valid; /* per kept split, per pair (sweep.pd_valid) */
    all_drops *drops;   /* per pair */
    cJSON *list;     /* the splits kept */
} all_search;
/* The c-th system x batch pair of the grid, batch fastest: the grid's
 * values, or the base trace's where an axis is absent. */
static void combo_at(const all_search *as, int c, const char **sname,
                     int64_t *b)
{
    int nb = cJSON_IsArray(as->bat) ? cJSON_GetArraySize(as->bat) : 1;
    const cJSON *sv = cJSON_IsArray(as->sys)
                          ? cJSON_GetArrayItem(as->sys, c / nb)
                          : NULL;
    const cJSON *bv = cJSON_IsArray(as->bat)
                          ? cJSON_GetArrayItem(as->bat, c % nb)
                          : NULL;
    *sname = cJSON_IsString(sv) ? sv->valuestring : as->s->g.system;
    *b = cJSON_IsNumber(bv) ? (int64_t)bv->valuedouble
                            : sweep_batch_for(as->s, *sname);
}

/* The splits are chosen against the grid's systems and batches, so those
 * are checked first, with the messages their axes give. */
static int check_combo_values(const sweep *s, const cJSON *sys,
                              const cJSON *bat)
{
    const cJSON *e;
    int i = 0;
    char jp[64];
    cJSON_ArrayForEach(e, sys)
    {
        snprintf(jp, sizeof jp, "grid.system[%d]", i++);
        if (!cJSON_IsString(e) || !tpu_system_find(e->valuestring))
            return sweep_bad(s, jp, "%s", sweep_bad_system_msg);
        /* a system scale_batch cannot scale to would be searched at
         * batch 0 and blamed on "all" (fuzz_sweep) */
        int rc = sweep_scaled_ok(s, jp, e->valuestring);
        if (rc)
            return rc;
    }
    i = 0;
    cJSON_ArrayForEach(e, bat)
    {
        snprintf(jp, sizeof jp, "grid.batch[%d]", i++);
        if (!sweep_batch_ok(e))
            return sweep_bad(s, jp, "%s", sweep_bad_batch_msg);
    }
    return 0;
}

/* A graph_check_run or graph_parse message without the empty file name it
 * starts with (the file is the sweep's variant trace, which is not
 * written yet; sweep_bad names where in the sweep it comes from). */
static const char *strip_where(const char *msg)
{
    while (*msg == ':' || *msg == ' ')
        msg++;
    return msg;
}

/* "[1,4,2,1]" for the split in g. */
static void pd_label_now(const graph *g, int nsp, char *buf, size_t cap)
{
    size_t len = 0;
    for (int k = 0; k < nsp + 2 && len + 1 < cap; k++) {
        int w = snprintf(buf + len, cap - len, "%s%d", k ? "," : "[",
                         g->pdims[k]);
        if (w < 0)
            break;
        len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
    }
    if (len + 1 < cap)
        snprintf(buf + len, cap - len, "]");
}

/* Puts the split 2^e[d] of each spatial dimension into the base graph
 * (2^sum cores per replica); 1 when every factor is within its
 * extent. */
static int put_split(graph *g, const gshape *sh, int nsp, const int *e,
                     int sum)
{
    int ok = 1;
    g->pdims_rank = nsp + 2;
    g->pdims[0] = g->pdims[nsp + 1] = 1;
    for (int d = 0; d < nsp; d++) {
        g->pdims[1 + d] = 1 << e[d];
        ok &= g->pdims[1 + d] <= sh->sp[d];
    }
    g->cores_per_replica = 1 << sum;
    return ok;
}

/* On how many system x batch pairs the split in the base graph is valid
 * (each pair's answer in as->cur). */
static int count_valid(all_search *as)
{
    int valid_on = 0;
    for (int c = 0; c < as->ncombo; c++) {
        const char *sname;
        int64_t b;
        combo_at(as, c, &sname, &b);
        tpu_error err = {0};
        as->cur[c] = graph_check_run(&as->s->g, sname, b, "", &err) == TPU_OK;
        valid_on += as->cur[c];
    }
    return valid_on;
}

/* The kept split in the base graph is not valid on pair c: named there
 * (the first few), with the reason for the first. */
static void note_dropped(all_search *as, int c)
{
    all_drops *d = &as->drops[c];
    int k = d->n++;
    if (k >= (int)(sizeof d->names / sizeof d->names[0]))
        return;
    pd_label_now(&as->s->g, as->nsp, d->names[k], sizeof d->names[k]);
    if (k > 0)
        return;
    const char *sname;
    int64_t b;
    combo_at(as, c, &sname, &b);
    tpu_error err = {0};
    graph_check_run(&as->s->g, sname, b, "", &err);
    snprintf(d->why, sizeof d->why, "%.299s", strip_where(err.msg));
}

/* Adds the split in the base graph to the list when every other input it
 * applies to takes it, with the pairs it is valid on; 1 kept, 0 not, -1
 * out of memory. */
static int keep_split(all_search *as)
{
    const graph *g = &as->s->g;
    cJSON *d = cJSON_CreateArray();
    if (!d)
        return -1;
    for (int k = 0; k < as->nsp + 2; k++)
        cJSON_AddItemToArray(d, cJSON_CreateNumber(g->pdims[k]));
    char why[64];
    cJSON *full = sweep_pd_from_simple(as->s, d, as->nsp + 2, why,
                                       sizeof why);
    int n = cJSON_GetArraySize(as->list);
    unsigned char *v = full && pd_fits_inputs(as->s, full)
                           ? realloc(as->valid, (size_t)(n + 1) *
                                                    (size_t)as->ncombo)
                           : NULL;
    int kept = v != NULL;
    if (v) {
        as->valid = v;
        memcpy(v + (size_t)n * (size_t)as->ncombo, as->cur,
               (size_t)as->ncombo);
        cJSON_AddItemToArray(as->list, d);
    } else {
        cJSON_Delete(d);
    }
    int oom = !full || (!v && pd_fits_inputs(as->s, full));
    cJSON_Delete(full);
    return oom ? -1 : kept;
}

/* The split of exponents e (summing to sum): kept when within the
 * extents and valid on some system x batch pair (the grid runs it on
 * those only).  -1 when out of memory. */
static int try_split(all_search *as, const int *e, int sum)
{
    if (!put_split(&as->s->g, as->sh, as->nsp, e, sum))
        return 0;
    int valid_on = count_valid(as);
    if (valid_on == 0)
        return 0;
    int kept = keep_split(as);
    if (kept <= 0)
        return kept;
    as->ndropped += valid_on < as->ncombo;
    for (int c = 0; c < as->ncombo; c++) {
        if (as->cur[c])
            as->combo_ok[c]++;
        else
            note_dropped(as, c);
    }
    return 0;
}

/* The next composition of e's sum into nsp parts, e[0] descending; 0
 * after the last. */
static int next_composition(int *e, int nsp)
{
    int k = nsp - 2;
    while (k >= 0 && e[k] == 0)
        k--;
    if (k < 0)
        return 0;
    e[k]--;
    int rest = 0;
    for (int j = k + 1; j < nsp; j++) {
        rest += e[j];
        e[j] = 0;
    }
    e[k + 1] = rest + 1;
    return 1;
}

/* Every split by cores per replica (powers of two up to
 * SWEEP_ALL_MAX_CPR), then the outer dimension's factor largest first.
 * -1 when out of memory. */
static int search_splits(all_search *as)
{
    int maxe = 0;
    while ((2 << maxe) <= SWEEP_ALL_MAX_CPR)
        maxe++;
    for (int sum = 0; sum <= maxe; sum++) {
        int e[GRAPH_MAX_SP] = {0};
        e[0] = sum;
        do {
            if (try_split(as, e, sum) < 0)
                return -1;
        } while (next_composition(e, as->nsp));
    }
    return 0;
}

/* How a message about "all" starts: the key a file's user wrote, nothing
 * where "all" was not typed (the command-line form). */
static const char *all_word(const sweep *s)
{
    return s->namer ? s->namer->all : "\"all\": ";
}

/* No split is valid on any pair: name the first pair (with a single
 * pair, the one the grid has). */
static int no_split_error(const all_search *as)
{
    const sweep *s = as->s;
    const char *sname;
    int64_t b;
    combo_at(as, 0, &sname, &b);
    return sweep_bad(s, "grid.partition_dims",
                     "%sno split of the first input is valid on %s at "
                     "batch %lld (%s)",
                     all_word(s), sname, (long long)b,
                     s->namer ? s->namer->advice
                              : "remove it from the grid or change the "
                                "batch");
}

/* One note per system x batch pair that does not run every split kept:
 * which (the first few by name) and why the first is not valid there.
 * The grid runs each split only where it is valid. */
static void print_dropped(const all_search *as)
{
    int nkept = cJSON_GetArraySize(as->list);
    for (int c = 0; c < as->ncombo; c++) {
        const all_drops *d = &as->drops[c];
        if (d->n == 0)
            continue;
        const char *sname;
        int64_t b;
        combo_at(as, c, &sname, &b);
        if (d->n == nkept) {
            fprintf(stderr, "sweep: note: on %s at batch %lld no split of "
                            "the first input is valid (the first, %s: %s): "
                            "nothing runs there\n",
                    sname, (long long)b, d->names[0], d->why);
            continue;
        }
        fprintf(stderr, "sweep: note: on %s at batch %lld, %d of the %d "
                        "splits %s not valid and not run:",
                sname, (long long)b, d->n, nkept, d->n == 1 ? "is" : "are");
        int shown = (int)(sizeof d->names / sizeof d->names[0]);
        for (int k = 0; k < d->n && k < shown; k++)
            fprintf(stderr, "%s %s", k ? "," : "", d->names[k]);
        if (d->n > shown)
            fprintf(stderr, " and %d more", d->n - shown);
        fprintf(stderr, " (%s: %s)\n", d->names[0], d->why);
    }
}

/* The base graph's own partitioning, which the search overwrites. */
typedef struct {
    int rank, cpr;
    int pd[GRAPH_MAX_PDIMS];
} saved_split;

static void save_split(const graph *g, saved_split *k)
{
    k->rank = g->pdims_rank;
    k->cpr = g->cores_per_replica;
    memcpy(k->pd, g->pdims, sizeof k->pd);
}

static void restore_split(graph *g, const saved_split *k)
{
    g->pdims_rank = k->rank;
    g->cores_per_replica = k->cpr;
    memcpy(g->pdims, k->pd, sizeof k->pd);
}

/* "partition_dims": "all": every split of the first input's spatial
 * dimensions over 1 to SWEEP_ALL_MAX_CPR cores per replica (powers of two,
 * as every Cloud TPU slice has 2^k cores), each factor at most its
 * extent, that `run` accepts on some system and batch of the grid
 * (graph_check_run, on the base trace with the split in place).  Listed by
 * cores per replica, then the outer dimension's factor largest first:
 * [1,1,1,1], [1,2,1,1], [1,1,2,1], [1,4,1,1], [1,2,2,1], ...  A split
 * valid on some systems and batches only runs on those (s->pd_valid), and
 * a note per system and batch on stderr names what it does not run. */
int sweep_expand_all(sweep *s, const cJSON *grid, cJSON **out)
{
    all_search as = {0};
    as.s = s;
    as.sh = &s->g.layers[first_input(&s->g)].out;
    as.nsp = as.sh->nsp;
    if (as.nsp < 1)
        return sweep_bad(s, "grid.partition_dims",
                         "%sthe first input has no spatial dimension",
                         all_word(s));
    as.sys = cJSON_GetObjectItemCaseSensitive(grid, "system");
    as.bat = cJSON_GetObjectItemCaseSensitive(grid, "batch");
    int rc = check_combo_values(s, as.sys, as.bat);
    if (rc)
        return rc;
    as.ncombo = (cJSON_IsArray(as.sys) ? cJSON_GetArraySize(as.sys) : 1) *
                (cJSON_IsArray(as.bat) ? cJSON_GetArraySize(as.bat) : 1);
    as.list = cJSON_CreateArray();
    as.combo_ok = calloc((size_t)as.ncombo, sizeof *as.combo_ok);
    as.cur = calloc((size_t)as.ncombo, 1);
    as.drops = calloc((size_t)as.ncombo, sizeof *as.drops);
    saved_split keep;
    save_split(&s->g, &keep);
    rc = as.list && as.combo_ok && as.cur && as.drops ? search_splits(&as)
                                                      : -1;
    restore_split(&s->g, &keep);
    if (rc)
        rc = cli_error(4, "out of memory");
    else if (cJSON_GetArraySize(as.list) == 0)
        rc = no_split_error(&as);
    else
        print_dropped(&as);
    free(as.combo_ok);
    free(as.cur);
    free(as.drops);
    if (rc) {
        free(as.valid);
        cJSON_Delete(as.list);
        return rc;
    }
    if (as.ndropped > 0) {
        s->pd_valid = as.valid;
        s->pd_ncombo = as.ncombo;
    } else {
        free(as.valid);
    }
    *out = as.list;
    return 0;
}

/* ---- --set values ------------------------------------------------------- */

/* Which generations the grid runs: gens[0] v2, gens[1] v3. */
static void grid_gens(const sweep *s, int gens[2])
{
    int as = sweep_axis_of(s, AX_SYSTEM);
    gens[0] = gens[1] = 0;
    if (as < 0) {
        const tpu_system *sy = tpu_system_find(s->g.system);
        gens[sy && sy->gen == 2 ? 0 : 1] = 1;
        return;
    }
    for (int i = 0; i < s->ax[as].n; i++) {
        const tpu_system *sy = tpu_system_find(s->ax[as].v[i].arg);
        if (sy)
            gens[sy->gen == 2 ? 0 : 1] = 1;
    }
}

/* Value i of --set axis ax, accepted by tpu_params_set on each
 * generation the grid runs. */
static int check_set_value(const sweep *s, const sweep_axis *ax, int i,
                           const int gens[2])
{
    for (int gi = 0; gi < 2; gi++) {
        if (!gens[gi])
            continue;
        tpu_params p;
        tpu_error err = {0};
        tpu_params_default(&p, gi + 2);
        if (!tpu_params_set(&p, ax->name, ax->v[i].arg, &err))
            continue;
        /* "--set K=V: out of range ..." -> "out of range ..." */
        const char *m = err.msg;
        if (strncmp(m, "--set ", 6) == 0 && strstr(m, ": "))
            m = strstr(m, ": ") + 2;
        char jp[128];
        snprintf(jp, sizeof jp, "%s[%d]", ax->jpath, i);
        return sweep_bad(s, jp, "%s (value %s)", m, ax->v[i].arg);
    }
    return 0;
}

/* Run r's overrides together accepted by tpu_params_set and the rules
 * between keys (tpu_params_check).  A key that over-determines a quantity
 * with another (hbm.bandwidth_gbs with hbm.data_rate_gtps) fails here, at
 * the first grid point. */
static int check_set_point(const sweep *s, long long r)
{
    int idx[SWEEP_MAX_AXES];
    sweep_run_index(s, r, idx);
    int as = sweep_axis_of(s, AX_SYSTEM);
    const tpu_system *sy = tpu_system_find(
        as >= 0 ? sweep_val_of(s, as, idx)->arg : s->g.system);
    tpu_params p;
    tpu_error err = {0};
    tpu_params_default(&p, sy ? sy->gen : 3);
    int last = -1;
    tpu_status st = TPU_OK;
    for (int a = 0; a < s->naxes && !st; a++)
        if (s->ax[a].kind == AX_SET) {
            st = tpu_params_set(&p, s->ax[a].name,
                                sweep_val_of(s, a, idx)->arg, &err);
            last = a;
        }
    if (!st && !tpu_params_check(&p, &err))
        return 0;
    char msg[sizeof err.msg];
    cli_shown(msg, sizeof msg, err.msg);
    char jp[128];
    snprintf(jp, sizeof jp, "%s[%d]", s->ax[last].jpath, idx[last]);
    return sweep_bad(s, jp, "%s (run %04lld)", msg, r);
}

/* Every --set key is one of the table's and every value is accepted by
 * tpu_params_set for each generation the grid runs; then each grid
 * point's overrides together are accepted by tpu_params_set and pass the
 * rules between keys (tpu_params_check), as they must in `run`. */
int sweep_check_sets(const sweep *s)
{
    int gens[2];
    grid_gens(s, gens);
    int any = 0;
    for (int a = 0; a < s->naxes; a++) {
        const sweep_axis *ax = &s->ax[a];
        if (ax->kind != AX_SET)
            continue;
        any = 1;
        if (!tpu_param_find(ax->name))
            return sweep_bad(s, ax->jpath, "unknown parameter (see tpuemu "
                                           "run --help for the list)");
        for (int i = 0; i < ax->n; i++) {
            int rc = check_set_value(s, ax, i, gens);
            if (rc)
                return rc;
        }
    }
    long long nruns = any ? sweep_count_runs(s) : 0;
    for (long long r = 0; r < nruns; r++) {
        int rc = check_set_point(s, r);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- partitionings -------------------------------------------------------- */

/* The base trace with partitioning v: the new run section, no reference
 * (the published figure belongs to the base partitioning only).  The name
 * stays the trace's own (only the file name says the split): a run of a
 * variant is a run of that trace, so `check` compares its report with a
 * plain `run` of the same trace, another split being a note, not another
 * trace.  NULL when out of memory. */
static cJSON *make_variant(const sweep *s, const sweep_val *v)
{
    return sweep_variant_doc(s->base, v->pd, v->cpr);
}

cJSON *sweep_variant_doc(const cJSON *base, const cJSON *full_pd, int cpr)
{
    cJSON *t = cJSON_Duplicate(base, 1);
    if (!t)
        return NULL;
    cJSON *run = cJSON_GetObjectItemCaseSensitive(t, "run");
    cJSON_DeleteItemFromObjectCaseSensitive(run, "num_cores_per_replica");
    cJSON_DeleteItemFromObjectCaseSensitive(run, "input_partition_dims");
    cJSON *pd = cJSON_Duplicate(full_pd, 1);
    if (!pd || !cJSON_AddNumberToObject(run, "num_cores_per_replica", cpr)) {
        cJSON_Delete(pd);
        cJSON_Delete(t);
        return NULL;
    }
    cJSON_AddItemToObject(run, "input_partition_dims", pd);
    cJSON_DeleteItemFromObjectCaseSensitive(t, "reference");
    return t;
}

/* The trace that partitioning v's runs read (make_variant), on the
 * largest slice with a batch that splits over it, parsed into *g (free it
 * either way); err's message names no file (strip_where). */
static tpu_status parse_variant(const sweep *s, const sweep_val *v,
                                const tpu_system *big, graph *g,
                                tpu_error *err)
{
    cJSON *t = make_variant(s, v);
    cJSON *run = cJSON_GetObjectItemCaseSensitive(t, "run");
    if (t) {
        cJSON_ReplaceItemInObjectCaseSensitive(
            t, "system", cJSON_CreateString(big->name));
        cJSON_ReplaceItemInObjectCaseSensitive(
            run, "global_batch", cJSON_CreateNumber(big->cores));
    }
    char *text = t ? cJSON_PrintUnformatted(t) : NULL;
    cJSON_Delete(t);
    if (!text) {
        memset(g, 0, sizeof *g);
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of memory");
    }
    tpu_status rc = graph_parse(g, text, strlen(text), "", err);
    free(text);
    return rc;
}

/* The grid point's axes: partition_dims, system, batch (-1 when absent)
 * and the value index on each. */
typedef struct {
    int apd, asys, abat;
    int ipd, isys, ibat;
} grid_point;

/* Which axis graph_check_run's message m is about (-1: the trace), and
 * the value index on it in *ib. */
static int blame_axis(const grid_point *p, const char *m, int *ib)
{
    int blame = -1;
    if (strstr(m, "global_batch")) {
        if (p->abat >= 0)
            blame = p->abat, *ib = p->ibat;
        else if (p->asys >= 0)
            blame = p->asys, *ib = p->isys;
        else if (p->apd >= 0)
            blame = p->apd, *ib = p->ipd;
    } else if (strstr(m, "partition_dims") ||
               strstr(m, "cores_per_replica")) {
        if (p->apd >= 0)
            blame = p->apd, *ib = p->ipd;
        else if (p->asys >= 0)
            blame = p->asys, *ib = p->isys;
    } else if (strncmp(m, "system", 6) == 0 && p->asys >= 0) {
        blame = p->asys, *ib = p->isys;
    }
    return blame;
}

/* One grid point's system, batch and partitioning, checked as `run`
 * checks them (graph_check_run on the trace `run` would read).  The
 * message names the axis that the failed check is about. */
static int check_point(const sweep *s, const graph *g, const grid_point *p)
{
    const char *sys = p->asys >= 0 ? s->ax[p->asys].v[p->isys].arg
                                   : s->g.system;
    int64_t batch = p->abat >= 0
                        ? (int64_t)strtod(s->ax[p->abat].v[p->ibat].arg, NULL)
                        : sweep_batch_for(s, sys);
    tpu_error err = {0};
    if (!graph_check_run(g, sys, batch, "", &err))
        return 0;
    /* err.msg is ": key: what" (the path given was empty). */
    const char *m = err.msg;
    if (strncmp(m, ": ", 2) == 0)
        m += 2;
    int ib = 0, blame = blame_axis(p, m, &ib);
    char where[160], ctx[300] = "";
    if (blame >= 0)
        snprintf(where, sizeof where, "%s[%d]", s->ax[blame].jpath, ib);
    else
        snprintf(where, sizeof where, "trace");
    snprintf(ctx, sizeof ctx, " (grid point: %s%s, system %s, batch %lld)",
             p->apd >= 0 ? "partition_dims " : "",
             p->apd >= 0 ? s->ax[p->apd].v[p->ipd].label
                         : "trace's partitioning",
             sys, (long long)batch);
    char msg[sizeof err.msg];
    cli_shown(msg, sizeof msg, m);
    return sweep_bad(s, where, "%s%s", msg, ctx);
}

/* The largest slice there is. */
static const tpu_system *largest_system(void)
{
    const tpu_system *big = NULL;
    for (const tpu_system *t = tpu_systems(); t->name; t++)
        if (!big || t->cores > big->cores)
            big = t;
    return big;
}

/* Partitioning ip's trace parsed into *vg as the runs will read it, on
 * the largest slice with a batch that splits over it, so only the
 * partitioning itself can fail (rank, labels, N and C factors, factors vs
 * extents). */
static int variant_graph(const sweep *s, int apd, int ip, graph *vg)
{
    const tpu_system *big = largest_system();
    const sweep_val *v = &s->ax[apd].v[ip];
    char jp[64];
    snprintf(jp, sizeof jp, "grid.partition_dims[%d]", ip);
    if (big->cores % v->cpr != 0) {
        char m[160];
        snprintf(m, sizeof m, "%d cores per replica divide no slice "
                              "(slices have a power of two cores, at most "
                              "%d)",
                 v->cpr, big->cores);
        return sweep_bad(s, jp, "%s", m);
    }
    tpu_error err = {0};
    tpu_status rc = parse_variant(s, v, big, vg, &err);
    if (!rc)
        return 0;
    graph_free(vg);
    char msg[sizeof err.msg];
    cli_shown(msg, sizeof msg, strip_where(err.msg));
    return sweep_fail(s, rc == TPU_ERR_SYSTEM ? 4 : 2, jp, "%s", msg);
}

/* Every system x batch of the grid on partitioning p->ipd (graph g). */
static int check_systems_batches(const sweep *s, const graph *g,
                                 grid_point *p)
{
    int nsys = p->asys >= 0 ? s->ax[p->asys].n : 1;
    int nbat = p->abat >= 0 ? s->ax[p->abat].n : 1;
    int rc = 0;
    for (p->isys = 0; p->isys < nsys && !rc; p->isys++)
        for (p->ibat = 0; p->ibat < nbat && !rc; p->ibat++)
            if (!s->pd_valid ||
                s->pd_valid[(long long)p->ipd * s->pd_ncombo +
                            p->isys * nbat + p->ibat])
                rc = check_point(s, g, p);
    return rc;
}

/* Every (partitioning, system, batch) of the grid: each partitioning's
 * trace as variant_graph parses it, then the real systems and batches
 * point by point. */
int sweep_check_points(const sweep *s)
{
    grid_point p = {sweep_axis_of(s, AX_PD), sweep_axis_of(s, AX_SYSTEM),
                    sweep_axis_of(s, AX_BATCH), 0, 0, 0};
    if (p.apd < 0)
        return check_systems_batches(s, &s->g, &p);
    for (p.ipd = 0; p.ipd < s->ax[p.apd].n; p.ipd++) {
        graph vg;
        int rc = variant_graph(s, p.apd, p.ipd, &vg);
        if (rc)
            return rc;
        rc = check_systems_batches(s, &vg, &p);
        graph_free(&vg);
        if (rc)
            return rc;
    }
    return 0;
}

void sweep_variant_path(const sweep *s, const sweep_val *v, const char *out,
                        char *buf, size_t cap)
{
    const char *base = strrchr(s->trace, '/');
    base = base ? base + 1 : s->trace;
    size_t stem = strlen(base);
    if (stem > 5 && strcmp(base + stem - 5, ".json") == 0)
        stem -= 5;
    if (stem > 200)
        stem = 200;
    snprintf(buf, cap, "%.*s/traces/%.*s-pd%s.json", SWEEP_OUT_MAX, out,
             (int)stem, base, v->label);
}

void sweep_variant_paths(sweep *s, const char *out)
{
    int apd = sweep_axis_of(s, AX_PD);
    for (int i = 0; apd >= 0 && i < s->ax[apd].n; i++)
        sweep_variant_path(s, &s->ax[apd].v[i], out, s->ax[apd].v[i].trace,
                           sizeof s->ax[apd].v[i].trace);
}

int sweep_write_variants(sweep *s, const char *out)
{
    int apd = sweep_axis_of(s, AX_PD);
    for (int i = 0; apd >= 0 && i < s->ax[apd].n; i++) {
        sweep_val *v = &s->ax[apd].v[i];
        sweep_variant_path(s, v, out, v->trace, sizeof v->trace);
        cJSON *t = make_variant(s, v);
        char *text = t ? cli_json_text(t) : NULL;
        cJSON_Delete(t);
        if (!text)
            return cli_error(4, "out of memory");
        tpu_error err = {0};
        tpu_status st = tpu_write_atomic(v->trace, text, strlen(text), &err);
        free(text);
        if (st)
            return cli_fail(&err);
    }
    return 0;
}
