/* kernel_trace.c: a CUPTI injection library that writes every kernel and memory copy the process
 * runs on the GPU, with device timestamps, to a text file. It measures what `ncu` cannot: kernels
 * as they run inside replayed graphs, overlapped by programmatic dependent launches, and the gaps
 * between decode steps. Tracing does not serialize kernels (CUPTI's "concurrent kernel" records).
 *
 *   nvcc -shared -Xcompiler -fPIC -o build/kernel_trace.so tools/kernel_trace.c -lcupti
 *   CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so RF_TRACE_OUT=trace.txt build/rocmforge bench ...
 *   python3 scripts/trace_summary.py trace.txt
 *
 * One line per record, times in ns of the GPU clock:
 *   K <start> <end> <graph id> <grid x> <block x> <mangled kernel name>
 *   M <start> <end> <bytes> <copy kind (1 host to device, 2 device to host, 8 device to device)>
 * NVIDIA only (there is no CUPTI on ROCm; rocprof plays this part there). */
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *trace_file;

#define CUPTI_OK(call)                                                                  \
    do {                                                                                \
        CUptiResult r_ = (call);                                                        \
        if (r_ != CUPTI_SUCCESS) {                                                      \
            const char *s_ = "?";                                                       \
            cuptiGetResultString(r_, &s_);                                              \
            fprintf(stderr, "kernel_trace: %s failed: %s\n", #call, s_);                \
            return 0;                                                                   \
        }                                                                               \
    } while (0)

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buf = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *rec = NULL;
    while (trace_file && cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            fprintf(trace_file, "K %llu %llu %u %d %d %s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->graphId, k->gridX, k->blockX, k->name ? k->name : "?");
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            fprintf(trace_file, "M %llu %llu %llu %u\n", (unsigned long long)m->start, (unsigned long long)m->end,
                    (unsigned long long)m->bytes, (unsigned)m->copyKind);
        }
    }
    free(buf);
}

static void flush_at_exit(void) {
    cuptiActivityFlushAll(1);
    if (trace_file) fclose(trace_file);
    trace_file = NULL;
}

/* Called by the CUDA driver when CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void) {
    const char *path = getenv("RF_TRACE_OUT");
    trace_file = fopen(path && *path ? path : "kernel_trace.txt", "w");
    if (!trace_file) {
        perror("kernel_trace: cannot open the output");
        return 0;
    }
    CUPTI_OK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    atexit(flush_at_exit);
    return 1;
}
