/* `tpuemu view`'s command line without a display: --size's limits, no
 * display and no --screenshot, files that are not reports. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu/out/outfile.h"
#include "test/harness.h"

#define TINY "traces/small/tiny2d.json"

static void view_size_cases(th_ctx *t)
{
    static th_cmd_result c;
    th_case(t, "view --size names both limits when it refuses a size");
    th_run(&c, "SDL_VIDEODRIVER=dummy %s view %s --size 16384x400 "
               "--screenshot %s/p5.png",
           th_bin(), TINY, th_tmpdir());
    TH_CHECKF(t, c.status == 2 && strstr(c.err, "8192x8192") &&
                     strstr(c.err, "640x400"),
              "exit %d: %s", c.status, c.err);
}

static void view_cases(th_ctx *t)
{
    th_cmd_result *c = malloc(sizeof *c);
    if (!c)
        return;
    th_case(t, "view with no display and no --screenshot: exit 4 at once");
    th_run(c, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER "
              "timeout 20 %s view %s",
           th_bin(), TINY);
    TH_CHECKF(t, c->status == 4, "status %d (124: hung), stderr %s",
              c->status, c->err);
    TH_CHECKF(t, strstr(c->err, "--screenshot") != NULL, "stderr: %s",
              c->err);

    th_case(t, "view on SDL's dummy driver without --screenshot: exit 4");
    th_run(c, "SDL_VIDEODRIVER=dummy timeout 20 %s view %s", th_bin(),
           TINY);
    TH_CHECKF(t, c->status == 4 && strstr(c->err, "'dummy'"),
              "status %d, stderr %s", c->status, c->err);

    th_case(t, "view of a sweep's CSV or a validate report says what they are");
    char csv[512];
    snprintf(csv, sizeof csv, "%s/view-cli-results.csv", th_tmpdir());
    th_put(csv, "point,system,step_time_s\n0,v3-8,0.5\n");
    th_run(c, "%s view %s --screenshot %s/view-cli-x.png", th_bin(), csv,
           th_tmpdir());
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "step_time.png"),
              "csv: status %d, stderr %s", c->status, c->err);
    snprintf(csv, sizeof csv, "%s/view-cli-val.json", th_tmpdir());
    th_put(csv, "{\"format\": \"tpuemu-validation/1\", \"traces\": []}");
    th_run(c, "%s view %s --screenshot %s/view-cli-x.png", th_bin(), csv,
           th_tmpdir());
    TH_CHECKF(t, c->status == 2 && strstr(c->err, "a validate report"),
              "validation: status %d, stderr %s", c->status, c->err);

    th_case(t, "view --screenshot with no display still works");
    th_run(c, "env -u DISPLAY -u WAYLAND_DISPLAY -u SDL_VIDEODRIVER "
              "timeout 60 %s view %s --screenshot %s/view-cli-view.png",
           th_bin(), TINY, th_tmpdir());
    TH_CHECKF(t, c->status == 0, "status %d, stderr %s", c->status, c->err);
    free(c);
}

void th_suite_view_cli(th_ctx *t)
{
    view_size_cases(t);
    view_cases(t);
}
