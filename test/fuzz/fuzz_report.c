/* libFuzzer entry for the report reader (`check` and `view` read reports
 * users hand them): `make fuzz-report FUZZ_SECONDS=600`.
 *
 * Beyond "no crash, no leak, no UB" (ASan/UBSan) it enforces the reader's
 * contract (docs/CHECK.md): a result is OK or TPU_ERR_INPUT (TPU_ERR_SYSTEM
 * only for memory); a refusal is one line starting with the file name; an
 * accepted report has every core once, in core order, with finite
 * non-negative figures; and it survives a round trip: written again by
 * report_to_json, it reads back, and writing that gives the same bytes
 * (what `check` and the viewer see is what the file says). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "emu/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_accepted(const emu_result *r)
{
    if (r->cores < 1 || !r->per_core)
        abort();
    for (int k = 0; k < r->cores; k++) {
        const emu_core_result *c = &r->per_core[k];
        if (c->core != k)
            abort();
        if (!isfinite(c->step_time_s) || c->step_time_s < 0)
            abort();
        for (int j = 0; j < CAT_COUNT; j++)
            if (!isfinite(c->breakdown_s[j]) || c->breakdown_s[j] < 0)
                abort();
    }
    if (!isfinite(r->step_time_s) || r->step_time_s < 0)
        abort();
}

static void round_trip(const emu_result *r)
{
    char *a = report_to_json(r);
    if (!a)
        return; /* out of memory: nothing to compare */
    emu_result r2;
    tpu_error e;
    memset(&r2, 0, sizeof r2);
    tpu_status st = report_parse(&r2, a, strlen(a), "again.json", &e);
    if (st == TPU_ERR_SYSTEM) {
        free(a);
        return;
    }
    if (st != TPU_OK)
        abort(); /* the writer wrote what the reader refuses */
    char *b = report_to_json(&r2);
    if (b && strcmp(a, b) != 0)
        abort(); /* a figure changed on the way through */
    free(b);
    free(a);
    emu_result_free(&r2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    emu_result r;
    tpu_error e;
    memset(&r, 0, sizeof r);
    e.msg[0] = 0;
    tpu_status st = report_parse(&r, (const char *)data, size, "fuzz.json",
                                 &e);
    if (st == TPU_OK) {
        check_accepted(&r);
        round_trip(&r);
    } else if (st == TPU_ERR_INPUT) {
        if (strncmp(e.msg, "fuzz.json: ", 11) != 0 || strchr(e.msg, '\n'))
            abort();
    } else if (st != TPU_ERR_SYSTEM) {
        abort();
    }
    emu_result_free(&r);
    return 0;
}
