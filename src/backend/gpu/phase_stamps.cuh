/* phase_stamps.cuh: optional timestamps of phases inside the decode kernels, for the timeline of a
 * step (which phase of which kernel a step waits on). Compiled in only with -DRF_PHASE_STAMPS
 * (CUDA; `make NVCCFLAGS=-DRF_PHASE_STAMPS CFLAGS=-DRF_PHASE_STAMPS`, as `scripts/device-run.sh
 * stamps` builds it); otherwise every macro below is empty. When on, a decode step is ~5% slower.
 *
 * A kernel declares RF_STAMPS_BEGIN (point 0, the block's start), marks points 1..5 with
 * RF_STAMP(i) (thread 0 of the block records %globaltimer and clock64) and ends with
 * RF_STAMPS_END(tag) (a barrier, point 3, then thread 0 appends one record to a ring holding the
 * last RF_STAMP_CAP blocks of this translation unit). Points used: 1 after the grid dependency
 * wait, 2 after the input staging (or the attention's loop and warp merge), 3 the block's end, 4 and
 * 5 k_mvt's first ring slot ready and warp 0's loop end, or the decode attention's q loaded (and
 * rotated) and warp 0's loop end. rf_phase_stamps_dump_<file>() (gpu_backend.c calls
 * them at destroy) writes the ring to $RF_STAMPS_OUT/stamps-<file>.bin; scripts/phase_timeline.py
 * reads those files. Each translation unit has its own ring (no relocatable device code). */
#ifndef RF_PHASE_STAMPS_CUH
#define RF_PHASE_STAMPS_CUH

#if defined(RF_PHASE_STAMPS) && !defined(__HIP__) && !defined(__HIP_PLATFORM_AMD__)
#include <stdio.h>
#include <stdlib.h>

/* One block's record (128 bytes, the layout phase_timeline.py reads): globaltimer ns and SM
 * clock64 at points 0..5 (0 where a kernel does not mark a point), kernel tag, gridDim.x,
 * blockIdx.x, SM id. */
struct RfStampRec {
    unsigned long long g[6];
    long long c[6];
    unsigned tag, grid, blk, sm;
};
#define RF_STAMP_CAP (1u << 17)
static __device__ RfStampRec rf_stamp_ring[RF_STAMP_CAP];
static __device__ unsigned rf_stamp_count;

struct RfStamps {
    unsigned long long g[6];
    long long c[6];
};
static __device__ __forceinline__ void rf_stamp_at(RfStamps &s, int i) {
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(s.g[i]));
        s.c[i] = clock64();
    }
}
static __device__ __forceinline__ void rf_stamp_put(const RfStamps &s, unsigned tag) {
    if (threadIdx.x != 0) return;
    unsigned sm;
    asm("mov.u32 %0, %%smid;" : "=r"(sm));
    RfStampRec *r = rf_stamp_ring + (atomicAdd(&rf_stamp_count, 1u) & (RF_STAMP_CAP - 1));
    for (int i = 0; i < 6; i++) r->g[i] = s.g[i], r->c[i] = s.c[i];
    r->tag = tag, r->grid = gridDim.x, r->blk = blockIdx.x, r->sm = sm;
}
/* Host: the ring of this translation unit to $RF_STAMPS_OUT/stamps-<name>.bin (u32 total count,
 * then RF_STAMP_CAP records; the newest overwrite the oldest). */
static void rf_phase_stamps_write(const char *name) {
    const char *dir = getenv("RF_STAMPS_OUT");
    if (!dir) return;
    RfStampRec *h = (RfStampRec *)calloc(RF_STAMP_CAP, sizeof *h);
    unsigned n = 0;
    char path[1024];
    snprintf(path, sizeof path, "%s/stamps-%s.bin", dir, name);
    FILE *f = h ? fopen(path, "wb") : NULL;
    if (f && cudaDeviceSynchronize() == cudaSuccess &&
        cudaMemcpyFromSymbol(&n, rf_stamp_count, sizeof n) == cudaSuccess &&
        cudaMemcpyFromSymbol(h, rf_stamp_ring, sizeof(RfStampRec) * RF_STAMP_CAP) == cudaSuccess) {
        fwrite(&n, sizeof n, 1, f);
        fwrite(h, sizeof *h, RF_STAMP_CAP, f);
        fprintf(stderr, "phase stamps: %u blocks recorded, the last %u in %s\n", n,
                n < RF_STAMP_CAP ? n : RF_STAMP_CAP, path);
    } else {
        fprintf(stderr, "phase stamps: could not write %s\n", path);
    }
    if (f) fclose(f);
    free(h);
}
#define RF_STAMPS_BEGIN \
    RfStamps rf_st_ = {}; \
    rf_stamp_at(rf_st_, 0)
#define RF_STAMP(i) rf_stamp_at(rf_st_, (i))
/* RF_STAMP after the float v is computed (the timer read takes v as an input operand, so the
 * compiler cannot hoist it above the work that produces v). */
#define RF_STAMP_AFTER(i, v) \
    do { \
        if (threadIdx.x == 0) { \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(rf_st_.g[(i)]) : "f"(v)); \
            rf_st_.c[(i)] = clock64(); \
        } \
    } while (0)
#define RF_STAMPS_END(tag) \
    do { \
        __syncthreads(); \
        rf_stamp_at(rf_st_, 3); \
        rf_stamp_put(rf_st_, (tag)); \
    } while (0)
#else
#define RF_STAMPS_BEGIN (void)0
#define RF_STAMP(i) (void)0
#define RF_STAMP_AFTER(i, v) (void)0
#define RF_STAMPS_END(tag) (void)0
#endif

/* kernel tags of the records */
#define RF_STAMP_MVT 1
#define RF_STAMP_MVP 2
#define RF_STAMP_SWIGLU 3
#define RF_STAMP_ATTN 4

#endif
