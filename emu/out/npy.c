#include "emu/out/npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/out/outfile.h"

tpu_status npy_encode_f32(const char *path, const float *data, int rank,
                          const int64_t *shape, unsigned char **out,
                          size_t *out_len, tpu_error *err)
{
    *out = NULL;
    *out_len = 0;
    char hdr[256];
    int o = snprintf(hdr, sizeof hdr,
                     "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    int64_t n = 1;
    for (int i = 0; i < rank && o < (int)sizeof hdr; i++) {
        o += snprintf(hdr + o, sizeof hdr - (size_t)o, "%lld%s",
                      (long long)shape[i],
                      rank == 1      ? ","
                      : i + 1 < rank ? ", "
                                     : "");
        n *= shape[i];
    }
    if (o < (int)sizeof hdr)
        o += snprintf(hdr + o, sizeof hdr - (size_t)o, "), }");
    if (o >= (int)sizeof hdr - 70)
        return tpu_fail(err, TPU_ERR_INPUT, "%s: array rank too large", path);
    /* magic (6) + version (2) + header length (2) + header, to 64 bytes */
    size_t total_hdr = (size_t)(10 + o + 1 + 63) / 64 * 64;
    size_t hlen = total_hdr - 10;
    size_t len = total_hdr + (size_t)n * 4;
    unsigned char *buf = malloc(len);
    if (!buf)
        return tpu_fail(err, TPU_ERR_SYSTEM, "out of host memory");
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8);
    memset(buf + 10, ' ', hlen);
    memcpy(buf + 10, hdr, (size_t)o);
    buf[total_hdr - 1] = '\n';
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &data[i], 4);
        for (int k = 0; k < 4; k++)
            buf[total_hdr + (size_t)i * 4 + (size_t)k] =
                (unsigned char)(u >> (8 * k));
    }
    *out = buf;
    *out_len = len;
    return TPU_OK;
}

tpu_status npy_write_f32(const char *path, const float *data, int rank,
                         const int64_t *shape, tpu_error *err)
{
    unsigned char *buf;
    size_t len;
    tpu_status rc = npy_encode_f32(path, data, rank, shape, &buf, &len, err);
    if (rc == TPU_OK)
        rc = outfile_write(path, buf, len, err);
    free(buf);
    return rc;
}
