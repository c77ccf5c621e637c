/* The harness itself: the check that fails a suite leaving a process
 * running finds one a shell left in the background, names it, and kills
 * it. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test/harness.h"

void th_suite_harness(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    char desc[2048];
    if (!c)
        return;
    th_case(t, "a background process left by a command is found, named and "
               "killed");
    TH_CHECKF(t, th_children(desc, sizeof desc) == 0, "before: %s", desc);
    /* the shell exits at once; its orphan becomes the runner's child,
     * named once it has exec'd sleep (until then its command line is
     * empty: a moment, up to 2 s on a loaded machine) */
    th_run(c, "sleep 37 >/dev/null 2>&1 &");
    int n = th_children(desc, sizeof desc);
    for (int i = 0; i < 100 && !(n == 1 && strstr(desc, "sleep 37")); i++) {
        struct timespec d = {0, 20000000L};
        nanosleep(&d, NULL);
        n = th_children(desc, sizeof desc);
    }
    TH_CHECKF(t, n == 1 && strstr(desc, "sleep 37"), "%d: %s", n, desc);
    th_children_kill();
    n = th_children(desc, sizeof desc);
    TH_CHECKF(t, n == 0, "after the kill %d: %s", n, desc);
    free(c);
}
