/* `tpuemu view TRACE.json|R.json [--screenshot OUT.png]`: the SDL viewer.
 * A front end: it gets an emu_result from the core (sim_run for a trace,
 * report_read for a report) and draws it; see docs/VIEWER.md.
 *
 * Options for development and tests: --size WxH (window size), --script
 * "KEYS" (injects key and mouse events through SDL's event queue before the
 * screenshot, for tests: "z z right tab", "move:400,200", "click:X,Y",
 * "wheelup", "wheeldown"), and the hidden --demo / --demo-2048 (synthetic
 * v3-64 / v3-2048 results, no engine needed; 'd' switches between them)
 * and --frames N (with --screenshot: times N panning frames, for BENCH),
 * --lane-spans (with --screenshot: prints the layer lane's spans, for
 * tests). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/chart.h"
#include "emu/cli/cli.h"
#include "emu/out/font.h"
#include "emu/graph.h"
#include "emu/report.h"
#include "emu/out/outfile.h"
#include "emu/rfile.h"
#include "emu/sim.h"
#include "emu/view/app.h"

static const char usage[] =
    "usage: tpuemu view TRACE.json|R.json [--screenshot OUT.png] [--size WxH]\n"
    "                   [--script \"KEYS\"] [--system NAME] [--batch N]\n"
    "                   [--set KEY=VALUE ...] [--freeze LIST]\n"
    "Opens the SDL viewer on a trace (simulated with its timeline recorded)\n"
    "or on a report JSON (bars, torus and layers: reports store no events).\n"
    "A trace takes run's what-if options (below); a report, already\n"
    "simulated, takes none.\n"
    "  --screenshot OUT.png  render one frame (headless when there is no\n"
    "                        display), write it as PNG and exit\n"
    "  --size WxH            window size (default 1280x800)\n"
    "  --script \"KEYS\"       inject keys first, e.g. \"z z right tab\";\n"
    "                        also move:X,Y click:X,Y wheelup wheeldown\n"
    "                        \"?\" or text:STR types text\n"
    "  --frames N            with --screenshot: time N panning frames\n"
    "                        (a benchmark: BENCHMARKS.md)\n"
    "  (for tests: --demo, --demo-2048, --lane-spans; docs/VIEWER.md)\n";

static const char usage_tail[] =
    "Keys: 1 2 3 4 / Tab panels, z x zoom, arrows pan and scroll, u unit rows,\n"
    "0 reset, h ? F1 help, q quit (docs/VIEWER.md).\n"
    "exit status: 0 done, 2 bad input or output path, 3 the trace does not\n"
    "fit, 4 SDL cannot start (no display without --screenshot) or out of\n"
    "memory.\n";

static void reset_view(view_app *a)
{
    a->v0 = 0;
    a->v1 = a->r.step_time_s > 0 ? a->r.step_time_s * 1.02 : 1e-3;
    a->row0 = 0;
    a->sel_ev = -1;
    a->sel_span = -1;
    if (a->bars)
        SDL_DestroyTexture(a->bars);
    a->bars = NULL;
}

static int set_result(view_app *a, emu_result *r)
{
    view_unindex(a);
    if (a->loaded)
        emu_result_free(&a->r);
    a->r = *r;
    a->loaded = 1;
    if (!view_index(a))
        return 0;
    reset_view(a);
    /* A report stores no events: open where its data is. */
    a->panel = a->has_events ? VIEW_TIMELINE : VIEW_BARS;
    return 1;
}

/* The file is read once, as the trace and report readers read it (a
 * FIFO with a timeout, no devices: docs/TRACE.md), and parsed as a report
 * when its start names the report format. */
/* 1 when the first 4 KiB of text contain what. */
static int head_has(const char *text, size_t len, const char *what)
{
    char head[4097];
    size_t n = len < 4096 ? len : 4096;
    memcpy(head, text, n);
    head[n] = 0;
    return strstr(head, what) != NULL;
}

static int looks_like_report(const char *text, size_t len)
{
    return head_has(text, len, "tpuemu-report/");
}

/* Files a user may hand view that are neither a trace nor a report: the
 * other outputs of tpuemu, named for what they are (the trace reader's
 * message would be a JSON syntax error or an unknown key). */
static int other_output(const char *text, size_t len, const char *path)
{
    size_t i = 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' ||
                       text[i] == '\r'))
        i++;
    if (i < len && text[i] != '{')
        return cli_error(2, "%s: not a JSON object: view reads a trace or a "
                            "tpuemu report (a sweep's results.csv is drawn in "
                            "its step_time.png)",
                         path);
    if (head_has(text, len, "tpuemu-validation/"))
        return cli_error(2, "%s: format: a validate report (its table is "
                            "what tpuemu validate prints): view reads a "
                            "trace or a run report (run --report)",
                         path);
    return 0;
}

static int load_file(view_app *a, const char *path, const cli_whatif *w)
{
    tpu_error err = {0};
    emu_result r = {0};
    tpu_status st;
    char *text = NULL;
    size_t len = 0;
    st = rfile_read(path, (size_t)512 << 20, RFILE_PIPE_IDLE_S, &text, &len,
                    &err);
    if (st != TPU_OK)
        return cli_fail(&err);
    int other = other_output(text, len, path);
    if (other) {
        free(text);
        return other;
    }
    if (looks_like_report(text, len)) {
        if (w->first) {
            free(text);
            return cli_error(2, "view: %s: %s is a report, already simulated "
                                "(the what-if options apply to a trace: view "
                                "the trace, or run it with them)",
                             w->first, path);
        }
        st = report_parse(&r, text, len, path, &err);
    } else {
        graph g = {0};
        st = graph_parse(&g, text, len, path, &err);
        if (st == TPU_OK) {
            sim_opts o;
            sim_opts_default(&o);
            int code = cli_whatif_apply(w, &g, path, &o);
            if (code) {
                graph_free(&g);
                free(text);
                return code;
            }
            o.trace_path = path;
            o.record_timeline = 1;
            /* A step that does not fit returns TPU_ERR_NOFIT and no
             * per-core results: the error (exit 3) says why. */
            st = sim_run(&g, &o, &r, &err);
            graph_free(&g);
        }
    }
    free(text);
    if (st != TPU_OK) {
        emu_result_free(&r);
        return cli_fail(&err);
    }
    if (!r.per_core || r.cores <= 0) {
        emu_result_free(&r);
        return cli_error(2, "%s: the result has no cores to show", path);
    }
    if (!set_result(a, &r))
        return cli_error(4, "view: out of memory");
    /* cut between characters: the window title is UTF-8 */
    font_fit(a->source, sizeof a->source, path, INT_MAX, NULL);
    return 0;
}

static int load_demo(view_app *a, int cores)
{
    emu_result r;
    if (!view_demo_build(&r, cores) || !set_result(a, &r))
        return cli_error(4, "view: cannot build the demo result");
    a->demo = cores;
    snprintf(a->source, sizeof a->source, "demo");
    return 0;
}

static void clamp(view_app *a)
{
    double step = a->r.step_time_s > 0 ? a->r.step_time_s * 1.02 : 1e-3;
    double w = a->v1 - a->v0;
    double minw = 1e-9;
    if (w < minw)
        w = minw;
    if (w > step)
        w = step;
    if (a->v0 < 0)
        a->v0 = 0;
    if (a->v0 + w > step)
        a->v0 = step - w;
    a->v1 = a->v0 + w;
    int nv = view_rows_visible(a), maxr = a->n_rows - nv;
    if (a->row0 > maxr)
        a->row0 = maxr;
    if (a->row0 < 0)
        a->row0 = 0;
    view_layers_clamp(a);
}

/* The layers panel scrolls its own list (by dr rows). */
static void scroll_layers(view_app *a, int dr)
{
    a->lrow0 += dr;
    view_layers_clamp(a);
}

static void zoom(view_app *a, double f, int mx)
{
    double t = (mx >= VIEW_LABELS && mx < a->W - 10)
                   ? a->v0 + (a->v1 - a->v0) * (mx - VIEW_LABELS) / (double)(a->W - 10 - VIEW_LABELS)
                   : 0.5 * (a->v0 + a->v1);
    a->v0 = t - (t - a->v0) * f;
    a->v1 = t + (a->v1 - t) * f;
    clamp(a);
}

static void on_key(view_app *a, SDL_Keycode k, Uint16 mod)
{
    double w = a->v1 - a->v0, pan = (mod & KMOD_SHIFT) ? 0.75 : 0.25;
    int nv = view_rows_visible(a);
    if (a->panel == VIEW_LAYERS) {
        int ls;
        view_lrow dummy;
        view_layer_rows(a, &dummy, 0, &ls);
        switch (k) {
        case SDLK_UP:
        case SDLK_w:
            scroll_layers(a, -1);
            return;
        case SDLK_DOWN:
        case SDLK_s:
            scroll_layers(a, 1);
            return;
        case SDLK_PAGEUP:
            scroll_layers(a, -ls);
            return;
        case SDLK_PAGEDOWN:
            scroll_layers(a, ls);
            return;
        case SDLK_HOME:
            scroll_layers(a, -a->lay_n);
            return;
        case SDLK_END:
            scroll_layers(a, a->lay_n);
            return;
        default:
            break;
        }
    }
    switch (k) {
    case SDLK_q:
        a->quit = 1;
        break;
    case SDLK_ESCAPE:
        if (a->help)
            a->help = 0;
        else
            a->sel_ev = a->sel_span = -1;
        break;
    case SDLK_h:
    case SDLK_F1:
        /* '?' comes as text (SDL_TEXTINPUT): on a US layout it is
         * Shift+slash, elsewhere another key; the key code would vary. */
        a->help = !a->help;
        break;
    case SDLK_TAB:
        a->panel = (a->panel + ((mod & KMOD_SHIFT) ? VIEW_PANELS - 1 : 1)) % VIEW_PANELS;
        break;
    case SDLK_1:
        a->panel = VIEW_TIMELINE;
        break;
    case SDLK_2:
        a->panel = VIEW_TORUS;
        break;
    case SDLK_3:
        a->panel = VIEW_BARS;
        break;
    case SDLK_4:
        a->panel = VIEW_LAYERS;
        break;
    case SDLK_z:
    case SDLK_PLUS:
    case SDLK_EQUALS:
    case SDLK_KP_PLUS:
        zoom(a, 0.5, a->mx);
        break;
    case SDLK_x:
    case SDLK_MINUS:
    case SDLK_KP_MINUS:
        zoom(a, 2, a->mx);
        break;
    case SDLK_0:
        a->v0 = 0;
        a->v1 = a->r.step_time_s * 1.02;
        clamp(a);
        break;
    case SDLK_LEFT:
    case SDLK_a:
        a->v0 -= w * pan;
        a->v1 -= w * pan;
        clamp(a);
        break;
    case SDLK_RIGHT:
    case SDLK_d:
        if (k == SDLK_d && a->demo) {
            load_demo(a, a->demo == 2048 ? 64 : 2048);
            break;
        }
        a->v0 += w * pan;
        a->v1 += w * pan;
        clamp(a);
        break;
    case SDLK_UP:
    case SDLK_w:
        a->row0--;
        clamp(a);
        break;
    case SDLK_DOWN:
    case SDLK_s:
        a->row0++;
        clamp(a);
        break;
    case SDLK_PAGEUP:
        a->row0 -= nv;
        clamp(a);
        break;
    case SDLK_PAGEDOWN:
        a->row0 += nv;
        clamp(a);
        break;
    case SDLK_HOME:
        a->row0 = 0;
        break;
    case SDLK_END:
        a->row0 = a->n_rows;
        clamp(a);
        break;
    case SDLK_u:
        a->units = !a->units;
        clamp(a);
        break;
    default:
        break;
    }
}

static void on_event(view_app *a, const SDL_Event *e)
{
    switch (e->type) {
    case SDL_QUIT:
        a->quit = 1;
        break;
    case SDL_KEYDOWN:
        on_key(a, e->key.keysym.sym, e->key.keysym.mod);
        break;
    case SDL_TEXTINPUT:
        if (!strcmp(e->text.text, "?"))
            a->help = !a->help;
        break;
    case SDL_MOUSEMOTION:
        a->mx = e->motion.x;
        a->my = e->motion.y;
        if (a->dragging && a->panel == VIEW_TIMELINE) {
            double dt = (a->drag_v1 - a->drag_v0) * (a->mx - a->drag_x) /
                        (double)(a->W - 10 - VIEW_LABELS);
            a->v0 = a->drag_v0 - dt;
            a->v1 = a->drag_v1 - dt;
            clamp(a);
        }
        break;
    case SDL_MOUSEBUTTONDOWN:
        a->mx = e->button.x;
        a->my = e->button.y;
        if (e->button.button == SDL_BUTTON_LEFT) {
            a->dragging = 1;
            a->drag_x = a->mx;
            a->drag_v0 = a->v0;
            a->drag_v1 = a->v1;
        }
        break;
    case SDL_MOUSEBUTTONUP:
        if (e->button.button == SDL_BUTTON_LEFT) {
            a->dragging = 0;
            /* A click (no drag) selects the event under the mouse. */
            if (abs(e->button.x - a->drag_x) < 3) {
                int c, u;
                long ev, si;
                view_layers_sync(a);
                a->sel_ev = a->sel_span = -1;
                if (view_pick_span(a, e->button.x, e->button.y, &si))
                    a->sel_span = si;
                else if (view_pick(a, e->button.x, e->button.y, &c, &u, &ev)) {
                    a->sel_core = c;
                    a->sel_unit = u;
                    a->sel_ev = ev;
                }
            }
        }
        break;
    case SDL_MOUSEWHEEL:
        if (a->panel == VIEW_TIMELINE) {
            if (e->wheel.y > 0)
                zoom(a, 0.8, a->mx);
            else if (e->wheel.y < 0)
                zoom(a, 1.25, a->mx);
        } else if (a->panel == VIEW_LAYERS && e->wheel.y)
            scroll_layers(a, e->wheel.y > 0 ? -3 : 3);
        break;
    case SDL_WINDOWEVENT:
        if (e->window.event == SDL_WINDOWEVENT_SIZE_CHANGED) {
            a->W = e->window.data1;
            a->H = e->window.data2;
            clamp(a);
        }
        break;
    default:
        break;
    }
}

/* Parses the --script words into SDL events on the queue. */
static int push_script(view_app *a, const char *script)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", script);
    int mx = a->mx, my = a->my;
    for (char *tok = strtok(buf, " ;\t"); tok; tok = strtok(NULL, " ;\t")) {
        SDL_Event e;
        memset(&e, 0, sizeof e);
        int x, y;
        if (sscanf(tok, "move:%d,%d", &x, &y) == 2 || sscanf(tok, "click:%d,%d", &x, &y) == 2) {
            e.type = SDL_MOUSEMOTION;
            e.motion.x = mx = x;
            e.motion.y = my = y;
            SDL_PushEvent(&e);
            if (tok[0] == 'c') {
                memset(&e, 0, sizeof e);
                e.type = SDL_MOUSEBUTTONDOWN;
                e.button.button = SDL_BUTTON_LEFT;
                e.button.x = x;
                e.button.y = y;
                SDL_PushEvent(&e);
                e.type = SDL_MOUSEBUTTONUP;
                SDL_PushEvent(&e);
            }
            continue;
        }
        if (!strcmp(tok, "wheelup") || !strcmp(tok, "wheeldown")) {
            e.type = SDL_MOUSEWHEEL;
            e.wheel.y = tok[5] == 'u' ? 1 : -1;
            SDL_PushEvent(&e);
            continue;
        }
        if (!strcmp(tok, "?") || !strncmp(tok, "text:", 5)) {
            /* typed text, as the OS sends it after the key press */
            e.type = SDL_TEXTINPUT;
            snprintf(e.text.text, sizeof e.text.text, "%s", tok[0] == '?' ? tok : tok + 5);
            SDL_PushEvent(&e);
            continue;
        }
        Uint16 mod = 0;
        if (!strncmp(tok, "shift+", 6)) {
            mod = KMOD_LSHIFT;
            tok += 6;
        }
        SDL_Keycode k = SDL_GetKeyFromName(tok);
        if (k == SDLK_UNKNOWN)
            return cli_error(2, "view: --script: unknown key '%s'", tok);
        e.type = SDL_KEYDOWN;
        e.key.state = SDL_PRESSED;
        e.key.keysym.sym = k;
        e.key.keysym.scancode = SDL_GetScancodeFromKey(k);
        e.key.keysym.mod = mod;
        SDL_PushEvent(&e);
        e.type = SDL_KEYUP;
        e.key.state = SDL_RELEASED;
        SDL_PushEvent(&e);
    }
    (void)mx;
    (void)my;
    return 0;
}

static int screenshot(view_app *a, const char *path)
{
    size_t n = (size_t)a->W * a->H * 3;
    uint8_t *pix = malloc(n);
    if (!pix)
        return cli_error(4, "view: out of memory");
    if (SDL_RenderReadPixels(a->ren, NULL, SDL_PIXELFORMAT_RGB24, pix, a->W * 3) != 0) {
        free(pix);
        return cli_error(4, "view: cannot read the frame: %s", SDL_GetError());
    }
    tpu_error err = {0};
    tpu_status st = chart_png_write(path, pix, a->W, a->H, 3, &err);
    free(pix);
    return st == TPU_OK ? 0 : cli_fail(&err);
}

/* --lane-spans (hidden, for tests): the window, the layer lane's core and
 * its spans as drawn in the screenshot, exact to the bit (%a). */
static void print_lane(const view_app *a)
{
    printf("window %a %a size %d %d core %d spans %zu\n", a->v0, a->v1, a->W, a->H,
           a->spans_core, a->n_spans);
    for (size_t i = 0; i < a->n_spans; i++) {
        const view_span *sp = &a->spans[i];
        printf("span %zu %a %a %d %d %zu\n", i, sp->t0, sp->t1, (int)sp->layer,
               (int)sp->phase, sp->n);
    }
}

static void shutdown_app(view_app *a)
{
    view_unindex(a);
    if (a->loaded)
        emu_result_free(&a->r);
    if (a->bars)
        SDL_DestroyTexture(a->bars);
    if (a->font)
        SDL_DestroyTexture(a->font);
    if (a->ren)
        SDL_DestroyRenderer(a->ren);
    if (a->win)
        SDL_DestroyWindow(a->win);
    SDL_Quit();
}

int cli_view(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(usage, stdout);
        cli_whatif_usage(stdout);
        fputs(usage_tail, stdout);
        return 0;
    }
    const char *file = NULL, *shot = NULL, *script = NULL;
    int demo = 0, W = 1280, H = 800, frames = 0, took, lane_spans = 0;
    cli_whatif wi;
    cli_whatif_init(&wi);
    for (int i = 1; i < argc; i++) {
        const char *v;
        if ((took = cli_whatif_take(&wi, argc, argv, &i)) != 0) {
            if (took < 0)
                return 2;
        } else if (!strcmp(argv[i], "--screenshot")) {
            if (!(shot = cli_value(argc, argv, &i)))
                return 2;
        } else if (!strcmp(argv[i], "--script")) {
            if (!(script = cli_value(argc, argv, &i)))
                return 2;
        } else if (!strcmp(argv[i], "--size")) {
            if (!(v = cli_value(argc, argv, &i)))
                return 2;
            if (sscanf(v, "%dx%d", &W, &H) != 2 || W < 640 || H < 400 || W > 8192 || H > 8192)
                return cli_error(2, "view: --size: expected WxH from 640x400 to 8192x8192, got '%s'", v);
        } else if (!strcmp(argv[i], "--frames")) {
            int64_t n;
            if (!(v = cli_value(argc, argv, &i)) || cli_int("--frames", v, 1, 100000, &n))
                return 2;
            frames = (int)n;
        } else if (!strcmp(argv[i], "--lane-spans")) {
            lane_spans = 1;
        } else if (!strcmp(argv[i], "--demo")) {
            demo = 64;
        } else if (!strcmp(argv[i], "--demo-2048")) {
            demo = 2048;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_error(2, "view: unknown option '%s' (see tpuemu view --help)", argv[i]);
        } else if (!file) {
            file = argv[i];
        } else
            return cli_error(2, "view: one file at a time ('%s' and '%s')", file, argv[i]);
    }
    if (!file && !demo)
        return cli_error(2, "view: expected TRACE.json or R.json (see tpuemu view --help)");
    if (demo && wi.first)
        return cli_error(2, "view: %s: the demo is a made-up result, not a "
                            "trace to simulate", wi.first);
    if (cli_whatif_check(&wi))
        return 2;
    if (shot) {
        /* before the simulation: a bad path costs nothing, and the input
         * is never replaced by its own screenshot */
        tpu_error werr = {0};
        if (file && outfile_same(file, shot))
            return cli_error(2, "%s: the screenshot would replace the input", shot);
        if (outfile_check(shot, &werr))
            return cli_fail(&werr);
    }

    view_app app;
    memset(&app, 0, sizeof app);
    view_app *a = &app;
    a->W = W;
    a->H = H;
    a->sel_ev = -1;
    a->sel_span = -1;
    a->spans_core = -1;
    a->mx = a->my = -1;
    int rc = demo ? load_demo(a, demo) : load_file(a, file, &wi);
    if (rc) {
        view_unindex(a);
        if (a->loaded)
            emu_result_free(&a->r);
        return rc;
    }

    /* Headless screenshots: with no display, SDL's dummy driver still
     * gives a window with a software framebuffer to render into. */
    int headless = !getenv("DISPLAY") && !getenv("WAYLAND_DISPLAY");
    int chosen = getenv("SDL_VIDEODRIVER") != NULL;
    if (shot && headless && !chosen)
        setenv("SDL_VIDEODRIVER", "dummy", 1);
    /* A window nobody can see would wait for input forever (a CI job that
     * calls view by mistake hangs to its time limit): refuse up front. */
    if (!shot && !script && headless && !chosen) {
        rc = cli_error(4, "view: no display (DISPLAY and WAYLAND_DISPLAY are "
                          "unset): use --screenshot OUT.png, or run it under "
                          "xvfb-run");
        view_unindex(a);
        emu_result_free(&a->r);
        return rc;
    }
    /* SIGINT and SIGTERM keep their meaning: SDL would turn them into a
     * quit event and the killed viewer would exit 0. */
    SDL_SetHint(SDL_HINT_NO_SIGNAL_HANDLERS, "1");
    if (SDL_Init(SDL_INIT_VIDEO) != 0) {
        rc = cli_error(4, "view: cannot start SDL video: %s%s", SDL_GetError(),
                       headless ? " (no display: use --screenshot)" : "");
        view_unindex(a);
        emu_result_free(&a->r);
        return rc;
    }
    /* When the display cannot be reached SDL falls back to a driver that
     * draws into memory: fine for a screenshot or a script, a hang else. */
    const char *drv = SDL_GetCurrentVideoDriver();
    if (!shot && !script && drv &&
        (strcmp(drv, "offscreen") == 0 || strcmp(drv, "dummy") == 0)) {
        rc = cli_error(4, "view: SDL's '%s' video driver shows no window "
                          "(is the display reachable?): use --screenshot "
                          "OUT.png, or run it under xvfb-run", drv);
        SDL_Quit();
        view_unindex(a);
        emu_result_free(&a->r);
        return rc;
    }
    char title[512];
    /* a->source is NUL-terminated (font_fit); the precision tells GCC so */
    snprintf(title, sizeof title, "tpuemu view - %.*s", (int)sizeof a->source - 1, a->source);
    a->win = SDL_CreateWindow(title, SDL_WINDOWPOS_CENTERED, SDL_WINDOWPOS_CENTERED,
                              W, H, (shot && !script) ? SDL_WINDOW_HIDDEN : SDL_WINDOW_RESIZABLE);
    if (a->win)
        /* Screenshots use the software renderer: same pixels everywhere. */
        a->ren = SDL_CreateRenderer(a->win, -1, shot ? SDL_RENDERER_SOFTWARE
                                                     : SDL_RENDERER_ACCELERATED | SDL_RENDERER_PRESENTVSYNC);
    if (a->win && !a->ren)
        a->ren = SDL_CreateRenderer(a->win, -1, SDL_RENDERER_SOFTWARE);
    if (!a->win || !a->ren || !view_font_init(a)) {
        rc = cli_error(4, "view: cannot open a window: %s", SDL_GetError());
        shutdown_app(a);
        return rc;
    }
    SDL_GetRendererOutputSize(a->ren, &a->W, &a->H);
    SDL_StartTextInput(); /* '?' arrives as text */
    clamp(a);

    if (script) {
        /* Let the window appear (a real display maps it asynchronously),
         * then run the script through the event queue like real input. */
        for (int i = 0; i < 5; i++) {
            SDL_Event e;
            while (SDL_PollEvent(&e))
                on_event(a, &e);
            view_draw(a);
            SDL_RenderPresent(a->ren);
            SDL_Delay(20);
        }
        if ((rc = push_script(a, script)) != 0) {
            shutdown_app(a);
            return rc;
        }
        /* Before any timing: --frames measures the scripted view. */
        SDL_Event e;
        while (SDL_PollEvent(&e))
            on_event(a, &e);
    }
    if (frames > 0) {
        /* Timing: pan by 1% of the window per frame, as a held arrow key
         * would; prints the mean frame time (draw + present). */
        Uint64 t0 = SDL_GetPerformanceCounter();
        for (int i = 0; i < frames; i++) {
            double w = a->v1 - a->v0;
            a->v0 += w * 0.01;
            a->v1 += w * 0.01;
            if (a->v1 >= a->r.step_time_s) {
                a->v1 = w;
                a->v0 = 0;
            }
            view_draw(a);
            SDL_RenderPresent(a->ren);
        }
        double ms = (double)(SDL_GetPerformanceCounter() - t0) * 1e3 /
                    (double)SDL_GetPerformanceFrequency() / frames;
        fprintf(stderr, "view: %d frames (%dx%d, %d cores, %d rows%s), mean %.2f ms per frame\n",
                frames, a->W, a->H, a->r.cores, a->n_rows, a->units ? " with unit rows" : "", ms);
    }
    if (shot) {
        SDL_Event e;
        while (SDL_PollEvent(&e))
            on_event(a, &e);
        view_draw(a);
        rc = screenshot(a, shot);
        if (!rc && lane_spans)
            print_lane(a);
        shutdown_app(a);
        return rc;
    }
    while (!a->quit) {
        SDL_Event e;
        if (SDL_WaitEventTimeout(&e, 100)) {
            on_event(a, &e);
            while (SDL_PollEvent(&e))
                on_event(a, &e);
        }
        view_draw(a);
        SDL_RenderPresent(a->ren);
    }
    shutdown_app(a);
    return 0;
}
