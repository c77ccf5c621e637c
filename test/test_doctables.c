/* Tables in the docs that a script prints: the docs must hold what the
 * script prints today, so a change to the model cannot leave them stale
 * (docs/VALIDATION.md's sensitivity table went stale twice before). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/harness.h"

void th_suite_doctables(th_ctx *t)
{
    th_case(t, "docs/VALIDATION.md holds the sensitivity table that "
               "scripts/sensitivity.sh prints today (no row fails)");
    if (th_asan()) /* 90 simulations: the plain build checks it */
        return;
    th_cmd_result r;
    th_run(&r, "TPUEMU=%s sh scripts/sensitivity.sh", th_bin_abs());
    if (!TH_CHECKF(t, r.status == 0, "sensitivity.sh exit %d: %s", r.status,
                   r.err))
        return;
    TH_CHECKF(t, strstr(r.out, " err ") == NULL,
              "a row of sensitivity.sh failed:\n%s", r.out);
    char *doc = th_slurp("docs/VALIDATION.md", NULL);
    if (!TH_CHECKF(t, doc != NULL, "cannot read docs/VALIDATION.md"))
        return;
    /* Line by line, so the first stale row is named. */
    char *save = r.out;
    for (char *line = strtok(save, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strstr(doc, line)) {
            TH_FAIL(t, "docs/VALIDATION.md lacks the row\n  %s\n(re-run "
                       "sh scripts/sensitivity.sh and paste its table)",
                    line);
            break;
        }
    }
    free(doc);
}
