/* fxref — a plain C reference for `tpuemu run --functional`: the forward
 * pass of a trace's graph in double precision, written from the op
 * definitions alone (docs/FUNCTIONAL.md), sharing no code with the emulator
 * except emu/fxdata.h's generator (the data contract), mxu/bf16.h's
 * rounding and the graph IR that the trace reader fills.  The tests
 * compare the emulator's output with it; scripts/fx_reference.py is a
 * second, numpy implementation of the same definitions.
 *
 * Build note: the Makefile compiles test/test_*.c only, so this file's
 * implementation (test/fxref.c) is compiled as part of test/test_fxref.c,
 * which #includes it; the symbols are linked into the test runner once.
 * Do not add test/fxref.c to the Makefile's TEST_SRCS as well (that would
 * define them twice).
 *
 * Semantics (the emulator's, docs/FUNCTIONAL.md):
 *   - input n: fxd_input(...), rounded to the input's dtype (bf16 via
 *     bf16_from_f32 of the float; f32: to float);
 *   - matrix layers (conv, conv_transpose, dense) of dtype bf16 multiply
 *     bf16 operands: both the weights and the incoming activations are
 *     rounded to bf16 first (a no-op when the producer is bf16); f32 layers
 *     use the fp32 master weights and the activations as stored;
 *   - a grouped conv ("groups": G) gives output channel f the input
 *     channels of its group f / (filters / G) only, through Keras's kernel
 *     [taps][cin / G][filters] (glorot fans taps x cin / G and taps x
 *     filters);
 *   - every layer's output is rounded to its dtype (bf16, or float for f32);
 *   - the number of classes (labels, templates) is the channels of the
 *     first loss layer's first input; 1 when the graph has no loss.
 * Layouts are global: [global_batch, spatial..., channels], row-major.
 */
#ifndef TEST_FXREF_H
#define TEST_FXREF_H

#include <stdint.h>

#include "emu/graph.h"
#include "emu/status.h"

/* Classes of the synthetic data: the first loss's first input's channels,
 * or 1 without a loss. */
int fxref_ncls(const graph *g);
/* Cores of a slice from its name ("v3-32" -> 32), 0 when unreadable. */
int fxref_system_cores(const char *system);

/* The last non-loss layer's output for the whole global batch (malloc'd,
 * *n_out elements, global layout).  Batchnorm statistics are per replica,
 * replicas = cores of g->system / g->cores_per_replica.  train selects
 * dropout's masks (train) or identity (infer). */
tpu_status fxref_forward(const graph *g, uint64_t seed, int64_t step,
                         int64_t global_batch, int train, double **out,
                         int64_t *n_out, tpu_error *err);
/* Same for any layer (a loss layer is refused), with the replica count
 * given explicitly (for --system overrides). */
tpu_status fxref_layer(const graph *g, int layer, uint64_t seed,
                       int64_t step, int64_t global_batch, int replicas,
                       int train, double **out, int64_t *n_out,
                       tpu_error *err);
/* The step's loss: the sum over the loss layers' inputs of the mean over
 * the global batch of -log softmax(logits)[y] (softmax_xent on flat
 * logits only; other kinds and spatial logits are refused with
 * TPU_ERR_INPUT).  Logits as the forward pass stores them. */
tpu_status fxref_loss(const graph *g, uint64_t seed, int64_t step,
                      int64_t global_batch, int train, double *loss,
                      tpu_error *err);

#endif
