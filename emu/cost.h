/* cost — what one firmware instruction costs on its unit, in integer
 * picoseconds: the MXU and vector unit from their cycle models, a DMA
 * block from the HBM model in steady state.
 *
 * The engine times every instruction with these; the lowering asks the
 * same questions when it chooses a tile size (a compiler's cost model that
 * agrees with the machine it compiles for).  Every cost is a pure function
 * of the instruction and the chip data, which is what lets the engine skip
 * repeated loop iterations exactly.
 */
#ifndef EMU_COST_H
#define EMU_COST_H

#include <stdint.h>

#include "emu/params.h"
#include "firmware/isa.h"

#define COST_PS 1e12

int64_t cost_cycles_ps(const tpu_params *hw, double cycles);

/* A matrix instruction on the core's MXUs (*mxu) and its overlapped vector
 * epilogue (*vec).  stream: it follows the previous product back to back
 * (the MXUs busy until the instant it issues), so its first load, fill
 * and drain are hidden (mxu_stream_cycles); otherwise a lone product's. */
void cost_matmul_ps(const tpu_params *hw, const fw_insn *in, int stream,
                    int64_t *mxu, int64_t *vec);
/* A vector pass. */
int64_t cost_vec_ps(const tpu_params *hw, const fw_insn *in);

/* DMA block costs, measured once per block size and cached (the HBM
 * model times both directions alike): the cache is the only state, and
 * it changes no answer. */
typedef struct cost_dma cost_dma;

/* NULL when host memory runs out. */
cost_dma *cost_dma_new(const tpu_params *hw);
void cost_dma_free(cost_dma *d);
/* 1 when d was made for hw's HBM (the only parameters its costs depend
 * on): a run with hw may then borrow it (sim_opts.dma_costs). */
int cost_dma_matches(const cost_dma *d, const tpu_params *hw);
/* Duration of one block of `bytes` (write: VMEM -> HBM, which takes as
 * long as the read) in steady state; 0 for no bytes. */
int64_t cost_dma_ps(cost_dma *d, int64_t bytes, int write);

/* The prices of whole instruction sequences, remembered by their
 * instructions: the lowering's tile search prices the same candidate
 * again for every layer of one shape (a network's repeated blocks, a
 * detection head on each level), and a price is a pure function of the
 * sequence and the chip data, which one memo must not mix. */
typedef struct cost_memo cost_memo;

/* For the chip data hw; NULL when host memory runs out. */
cost_memo *cost_memo_new(const tpu_params *hw);
void cost_memo_free(cost_memo *m);
/* 1 when m was made for chip data that price every local sequence as hw
 * does (all but the interconnect's, which no local sequence reads). */
int cost_memo_matches(const cost_memo *m, const tpu_params *hw);
/* The price remembered for prog, or -1. */
int64_t cost_memo_get(const cost_memo *m, const fw_program *prog);
/* Remembers prog's price (ps >= 0); without room it remembers nothing. */
void cost_memo_put(cost_memo *m, const fw_program *prog, int64_t ps);

#endif
