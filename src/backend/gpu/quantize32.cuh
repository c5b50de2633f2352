/* quantize32.cuh: the int8 path's quantization of one 32-element block held one element per lane,
 * for the kernels that leave their output quantized for the next matvec to copy (the decode
 * attention, attention_decode.cu and attention_decode_mma.cu; the swiglu, matmul.cu's k_swiglu_q). Bit for bit what matmul.cu's
 * mm_quantize_x with its non-finite mark writes for the same 32 values. */
#ifndef RF_QUANTIZE32_CUH
#define RF_QUANTIZE32_CUH

#include "gpu_port.h"

/* Element e of a vector whose value is o: per 32-element block (e / 32), d = amax / 127 and q =
 * round-to-even(o / d) clamped to +-127 (q = 0 where amax = 0); q to xq[e], {d, d * sum q} to
 * xd[e / 32] by the block's first lane. A block holding inf or NaN gets d = NaN. The block's 32
 * elements must be held by 32 consecutive lanes of one warp (lane = e % 32 within any warp size),
 * all of them calling together. */
static __device__ __forceinline__ void rf_quantize32(float o, int64_t e, int8_t *xq, float2 *xd) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    /* sm_80+: the block's |o| maximum as one integer reduction (redux.sync) of the bit patterns,
     * whose order is the floats' for values >= 0 (inf and NaN are the patterns >= 0x7f800000), and
     * sum q as another; a block holding inf or NaN takes the shuffles below. The same outputs bit
     * for bit with ~10 dependent shuffles fewer (H200 tg128, the decode attention's copy: 1B +0.5%,
     * 7B +0.2-0.4%; docs/PERF.md, forty-ninth session). */
    const unsigned mb = __reduce_max_sync(0xffffffffu, __float_as_uint(fabsf(o)));
    if (mb < 0x7f800000u) {
        const float am = __uint_as_float(mb), idr = am > 0.0f ? 127.0f / am : 0.0f;
        int qr = __float2int_rn(o * idr);
        qr = qr > 127 ? 127 : (qr < -127 ? -127 : qr);
        const int sqr = __reduce_add_sync(0xffffffffu, qr);
        xq[e] = (int8_t)qr;
        if ((e & 31) == 0) {
            const float dq = am / 127.0f;
            xd[e / 32] = make_float2(dq, dq * (float)sqr);
        }
        return;
    }
#endif
    float amax = fabsf(o);
    int bad = !(amax <= 3.402823466e38f); /* inf or NaN */
    for (int off = 16; off > 0; off >>= 1) {
        amax = fmaxf(amax, RF_SHFL_XOR(amax, off));
        bad |= RF_SHFL_XOR(bad, off);
    }
    const float dq = bad ? NAN : amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int q = __float2int_rn(o * id);
    q = q > 127 ? 127 : (q < -127 ? -127 : q);
    int sq = q;
    for (int off = 16; off > 0; off >>= 1) sq += RF_SHFL_XOR(sq, off);
    xq[e] = (int8_t)q;
    if ((e & 31) == 0) xd[e / 32] = make_float2(dq, dq * (float)sq);
}

#endif
