/* npy — writes an array as a NumPy .npy file (format version 1.0: magic,
 * a Python-dict header padded to 64 bytes, then the data little-endian),
 * so numpy.load reads --functional outputs without a parser of ours. */
#ifndef EMU_NPY_H
#define EMU_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "emu/status.h"

/* float32 array of the given shape (C order), written atomically. */
tpu_status npy_write_f32(const char *path, const float *data, int rank,
                         const int64_t *shape, tpu_error *err);
/* The same file's bytes (malloc'd into *out; path names it in messages),
 * for a caller that stages several outputs (emu/out/outfile.h). */
tpu_status npy_encode_f32(const char *path, const float *data, int rank,
                          const int64_t *shape, unsigned char **out,
                          size_t *out_len, tpu_error *err);

#endif
