/* fx_loss: the losses of a --functional run and their gradients
 * (fx_internal.h; definitions in docs/FUNCTIONAL.md). */
#include <math.h>

#include "emu/fx/fx_internal.h"
#include "emu/fx/fxdata.h"

#define FOCAL_ALPHA 0.25 /* RetinaNet's focal loss (Lin et al. 2017) */
#define FOCAL_GAMMA 2.0

/* The channel that is 1 in the one-hot target of example b (fxdata.h). */
static int64_t target_channel(const fx_state *x, int core, int64_t b, int64_t C)
{
    int y =
        fxd_class(x->cfg.seed, x->step, x->G, fx_gexample(x, core, b), x->ncls);
    return (int64_t)y % C;
}

static double sigm(double v)
{
    return 1.0 / (1.0 + exp(-v));
}

/* A row of C logits' maximum and sum of exp(v - max): softmax without
 * overflow. */
static void softmax_sums(const float *v, int64_t C, double *mx, double *se)
{
    *mx = v[0];
    *se = 0;
    for (int64_t ch = 1; ch < C; ch++)
        *mx = v[ch] > *mx ? v[ch] : *mx;
    for (int64_t ch = 0; ch < C; ch++)
        *se += exp(v[ch] - *mx);
}

/* Elements the mean of input k runs over (global batch x positions, x
 * channels for elementwise losses). */
static double loss_norm(const fx_state *x, const glayer *L, int k)
{
    const glayer *I = &x->g->layers[L->in[k]];
    double n = (double)x->G * (double)fx_gpos_count(I);
    if (L->loss != GLOSS_SOFTMAX_XENT)
        n *= (double)I->out.c;
    return n;
}

/* The loss pass: this core's partial loss (cores holding a distinct part
 * only) and the dice sums; the gradients follow once the sums are whole. */
tpu_status fxl_forward(fx_state *x, int core, int l, tpu_error *err)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    double total = 0;
    for (int k = 0; k < L->n_in; k++) {
        const fxt_tens *z;
        tpu_status rc = fx_act_of(x, core, L->in[k], &z, err);
        if (rc)
            return rc;
        int keep = fx_contributes(x, core, L->in[k]);
        double s = 0, *dz = &c->dice[(l * GRAPH_MAX_IN + k) * 3];
        int64_t rows = z->B * fxt_npos(z), C = z->C, npos = fxt_npos(z);
        for (int64_t r = 0; r < rows; r++) {
            const float *v = &z->v[r * C];
            int64_t tc = target_channel(x, core, r / npos, C);
            if (L->loss == GLOSS_SOFTMAX_XENT) {
                double mx, se;
                softmax_sums(v, C, &mx, &se);
                s += -(v[tc] - mx - log(se));
                continue;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                double t = ch == tc, zz = v[ch];
                double p = sigm(zz), dd = zz - t;
                switch (L->loss) {
                case GLOSS_SIGMOID_FOCAL: {
                    double pt = t > 0 ? p : 1 - p;
                    double a = t > 0 ? FOCAL_ALPHA : 1 - FOCAL_ALPHA;
                    s += -a * pow(1 - pt, FOCAL_GAMMA) *
                         log(pt > 1e-30 ? pt : 1e-30);
                    break;
                }
                case GLOSS_L2:
                    s += 0.5 * dd * dd;
                    break;
                case GLOSS_SIGMOID_XENT: /* -t log p - (1-t) log(1-p) */
                    s += (zz > 0 ? zz : 0) - zz * t + log1p(exp(-fabs(zz)));
                    break;
                case GLOSS_SMOOTH_L1:
                    s += fabs(dd) < 1 ? 0.5 * dd * dd : fabs(dd) - 0.5;
                    break;
                case GLOSS_DICE:
                    dz[0] += p * t;
                    dz[1] += p;
                    dz[2] += t;
                    break;
                default:
                    break;
                }
            }
        }
        /* The dice sums stay on every core: with an unsplit input they are
         * already whole (no all-reduce follows); the all-reduce counts the
         * distinct parts only.  The loss itself is counted once. */
        if (!keep)
            s = 0;
        if (L->loss != GLOSS_DICE)
            total += s / loss_norm(x, L, k);
    }
    c->loss_part[l] = total;
    return TPU_OK;
}

/* The loss's gradient into its inputs (the dice sums are whole by now). */
tpu_status fxl_backward(fx_state *x, int core, int l, tpu_error *err)
{
    fx_core *c = &x->cs[core];
    const glayer *L = &x->g->layers[l];
    int R = x->p->replicas;
    for (int k = 0; k < L->n_in; k++) {
        const fxt_tens *z;
        fxt_tens *gz;
        tpu_status rc;
        if ((rc = fx_act_of(x, core, L->in[k], &z, err)) ||
            (rc = fx_grad_of(x, core, L->in[k], &gz, err)))
            return rc;
        const double *dz = &c->dice[(l * GRAPH_MAX_IN + k) * 3];
        double N = loss_norm(x, L, k);
        int64_t rows = z->B * fxt_npos(z), C = z->C, npos = fxt_npos(z);
        for (int64_t r = 0; r < rows; r++) {
            const float *v = &z->v[r * C];
            float *gv = &gz->v[r * C];
            int64_t tc = target_channel(x, core, r / npos, C);
            if (L->loss == GLOSS_SOFTMAX_XENT) {
                double mx, se;
                softmax_sums(v, C, &mx, &se);
                for (int64_t ch = 0; ch < C; ch++)
                    gv[ch] += (float)((exp(v[ch] - mx) / se - (ch == tc)) / N);
                continue;
            }
            for (int64_t ch = 0; ch < C; ch++) {
                double t = ch == tc, zz = v[ch];
                double p = sigm(zz), dd = zz - t, gr = 0;
                switch (L->loss) {
                case GLOSS_SIGMOID_FOCAL: {
                    double a = t > 0 ? FOCAL_ALPHA : 1 - FOCAL_ALPHA;
                    double pt = t > 0 ? p : 1 - p;
                    pt = pt > 1e-30 ? pt : 1e-30;
                    /* d/dpt of -a (1-pt)^g log pt, times dpt/dz = +-p(1-p). */
                    double dpt =
                        a *
                        (FOCAL_GAMMA * pow(1 - pt, FOCAL_GAMMA - 1) * log(pt) -
                         pow(1 - pt, FOCAL_GAMMA) / pt);
                    gr = dpt * p * (1 - p) * (t > 0 ? 1 : -1) / N;
                    break;
                }
                case GLOSS_L2:
                    gr = dd / N;
                    break;
                case GLOSS_SIGMOID_XENT:
                    gr = (p - t) / N;
                    break;
                case GLOSS_SMOOTH_L1:
                    gr = (dd > 1 ? 1 : dd < -1 ? -1 : dd) / N;
                    break;
                case GLOSS_DICE: {
                    double S = dz[1] + dz[2] + 1, I2 = 2 * dz[0] + 1;
                    gr = -(2 * t * S - I2) / (S * S) * p * (1 - p) / R;
                    break;
                }
                default:
                    break;
                }
                gv[ch] += (float)gr;
            }
        }
    }
    return TPU_OK;
}
