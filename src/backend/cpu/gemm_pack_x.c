/* gemm_pack_x.c: the int8 activations regrouped for the tiled GEMMs (matmul_avx512.c,
 * gemm_avx2.c), portable C shared by both levels. */
#include <string.h>

#include "backend/cpu/matmul_kernels.h"
#include "backend/cpu/thread_scratch.h"

rf_gemm_x rf_gemm_pack_x(const rf_xq8 *x, int64_t n_tok, int G, int zp, int GT) {
    const int BS = 4 * G;
    const int64_t n_in = x->n_in, nbx = n_in / 32, nbz = n_in / BS;
    const int64_t ntg = (n_tok + GT - 1) / GT;
    const size_t xpb = (size_t)(ntg * nbz * GT * BS), xsb = sizeof(float) * (size_t)(ntg * nbz * GT);
    uint8_t *sc = rf_thread_scratch(1, xpb + 3 * xsb);
    rf_gemm_x p = {(int8_t *)sc, (int32_t *)(sc + xpb), (float *)(sc + xpb + xsb), (float *)(sc + xpb + 2 * xsb)};
    for (int64_t t = 0; t < ntg * GT; t++) {
        const int64_t tg = t / GT, tj = t % GT;
        const int tv = t < n_tok;
        const int16_t *s16 = x->s16 + t * 2 * nbx;
        for (int64_t b = 0; b < nbz; b++) {
            const size_t o = (size_t)((tg * nbz + b) * GT + tj);
            if (tv) memcpy(p.q + o * BS, x->q + t * n_in + b * BS, (size_t)BS);
            else memset(p.q + o * BS, 0, (size_t)BS);
            const int64_t bx = G == 8 ? b : b >> 1;
            p.z[o] = !tv ? 0 : -zp * (G == 8 ? (int32_t)s16[2 * b] + s16[2 * b + 1] : (int32_t)s16[b]);
            p.d[o] = tv ? x->d[t * nbx + bx] : 0.0f;
            p.ds[o] = !tv ? 0.0f : G == 8 ? x->dsum[t * nbx + bx] : x->d[t * nbx + bx] * (float)s16[b];
        }
    }
    return p;
}
