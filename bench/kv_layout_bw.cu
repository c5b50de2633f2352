/* kv_layout_bw.cu: how fast the decode attention's K/V access pattern can stream, for two cache
 * layouts (a question for docs/PERF.md's long-context notes, not part of the engine).
 *
 * The tensor-core decode kernel (attention_decode.cu, attn_dec_mma_kernel) reads, per GQA group, C bytes
 * of each position's K row and of its V row (C = head_dim x element size: 64 for q8_0 codes at
 * head_dim 64, 128 for f16), one block per (group, split), 4 warps taking rounds of 32 positions,
 * all of a round's loads issued before any is used. Here the same grid and rounds read
 *   strided:     byte (p, g) at p * G * C + g * C   (today's [position][kv head][dim] rows)
 *   head-major:  byte (p, g) at g * P * C + p * C   (each group's positions contiguous)
 * and only sum what they read; R rounds' loads go out together (R = 1: the kernel's one round in
 * flight per warp). 16 copies of the caches (one per "layer") rotate so that the L2
 * does not serve them. Prints GB/s of K + V bytes per layout and C.
 * Build: nvcc -O2 -arch=sm_90 -o kv_layout_bw bench/kv_layout_bw.cu */
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#define P 32768
#define G 8
#define LAYERS 16

template <int C, int R>
__global__ void __launch_bounds__(128) rounds(const uint4 *k, const uint4 *v, int headmajor, int n_split, uint32_t *sink) {
    const int g = blockIdx.x % G, s = blockIdx.x / G;
    const int per = (P + n_split - 1) / n_split, pb = s * per, pe = min(P, pb + per);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    constexpr int PIECES = R * 32 * C / 16 / 32; /* 16-byte pieces per lane per R rounds and matrix */
    uint32_t acc = 0;
    for (int p0 = pb + warp * 32 * R; p0 < pe; p0 += 4 * 32 * R) {
        uint4 a[PIECES], b[PIECES];
#pragma unroll
        for (int i = 0; i < PIECES; i++) {
            const int piece = i * 32 + lane, pos = p0 + piece / (C / 16), part = piece % (C / 16);
            const int64_t e = headmajor ? ((int64_t)g * P + pos) * (C / 16) + part : ((int64_t)pos * G + g) * (C / 16) + part;
            if (pos < pe) a[i] = k[e], b[i] = v[e];
            else a[i] = b[i] = make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int i = 0; i < PIECES; i++) acc += a[i].x ^ a[i].y ^ a[i].z ^ a[i].w ^ b[i].x ^ b[i].y ^ b[i].z ^ b[i].w;
    }
    if (acc == 0x12345678u) *sink = acc;
}

template <int C, int R> static void run(uint4 *k, uint4 *v, uint32_t *sink, int n_split) {
    const size_t layer = (size_t)P * G * C / 16;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    for (int hm = 0; hm < 2; hm++) {
        for (int l = 0; l < LAYERS; l++) rounds<C, R><<<G * n_split, 128>>>(k + l * layer, v + l * layer, hm, n_split, sink);
        float best = 1e30f;
        for (int it = 0; it < 5; it++) {
            cudaEventRecord(e0);
            for (int l = 0; l < LAYERS; l++) rounds<C, R><<<G * n_split, 128>>>(k + l * layer, v + l * layer, hm, n_split, sink);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            best = ms < best ? ms : best;
        }
        const double bytes = 2.0 * P * G * C * LAYERS;
        printf("C %3d bytes, %d x 32 positions per warp load, %-10s, %3d splits: %6.1f us per layer, %7.1f GB/s\n", C, R,
               hm ? "head-major" : "strided", n_split, best * 1e3 / LAYERS, bytes / (best * 1e-3) / 1e9);
    }
}

int main() {
    const size_t bytes = (size_t)P * G * 128 * LAYERS;
    uint4 *k, *v;
    uint32_t *sink;
    if (cudaMalloc(&k, bytes) || cudaMalloc(&v, bytes) || cudaMalloc(&sink, 4)) return printf("alloc failed\n"), 1;
    cudaMemset(k, 1, bytes), cudaMemset(v, 2, bytes);
    for (int ns : {66, 132, 264}) {
        run<64, 1>(k, v, sink, ns);
        run<64, 2>(k, v, sink, ns);
        run<64, 4>(k, v, sink, ns);
        run<128, 1>(k, v, sink, ns);
        run<128, 2>(k, v, sink, ns);
    }
    return cudaDeviceSynchronize() != cudaSuccess;
}
