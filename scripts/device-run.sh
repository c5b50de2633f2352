#!/usr/bin/env bash
# What the GPU machine runs, in one command (so one device lease covers build, tests and
# benchmarks). Usage: scripts/device-run.sh [test] [bench] [bench7b]   (results under $OUT)
#   test:    build, GPU kernel tests, every model test on the GPU, compute-sanitizer
#            memcheck + racecheck on the kernel tests
#   bench:   copy bandwidth, then `rocmforge bench` on mkmodel files of the 1B shape
#   bench7b: the same on the Llama-2-7B shape (F16, Q8_0, Q4_0, Q4_K_M)
#   longctx: tg128 after 512, 8192 and 32768 tokens of context (1B F16, 7B Q4_K_M), for each K/V
#            cache type in KVTYPES (default f16; e.g. KVTYPES="f16 q8_0")
#   mm:      the stand-alone matmul test and the decode matvec A/B (bench/bench_gpu_matmul ab)
#   trace:   decode timelines of tg128 (1B F16, 7B Q4_0 and Q4_K_M) with tools/kernel_trace.c
#            (CUPTI; CUPTI_DIR names libcupti's folder), summarized by scripts/trace_summary.py
#   stamps:  phase timelines of tg128 (STAMP_FILES, default 7B Q4_0 and 1B F16) from a second
#            build with -DRF_PHASE_STAMPS (src/backend/gpu/phase_stamps.cuh, build-stamps/),
#            summarized by scripts/phase_timeline.py (and per block by scripts/phase_blocks.py)
#   tgab:    tg128 of the files in AB_FILES (tag-type, e.g. "1b-q4_k_m 7b-q4_k_m") with the
#            decode matvec variants selected by environment (RF_MM_MVP=0, RF_MM_PDL_GRAPH=0, default)
#   bound:   tg128 of AB_FILES (default 7B Q4_0 and Q4_K_M), this tree against a second build with
#            BOUND_FLAGS (build-bound/; default -DRF_BOUND_NODOT: the decode matvecs skip their dots;
#            -DRF_BOUND_NOYREAD: their accumulating stores skip reading y; timing only)
#   vsbase:  tg128 of AB_FILES, this tree against the snapshot in .dev/snap (built into build-base/;
#            `sh scripts/device-prepare.sh snap REV` makes it), ALT alternations (default 2)
# Needs models/golden/vocab copied under .dev/shared (scripts/device-prepare.sh does it here).
set -uo pipefail
OUT=${OUT:-/tmp/rf-out}
mkdir -p "$OUT"
export ROCMFORGE_SHARED=$PWD/.dev/shared
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
date -u +%FT%TZ > "$OUT/summary.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$OUT/summary.txt"
export CFLAGS="-I$PWD/.dev/pcre2/include" LDFLAGS="-L$PWD/.dev/pcre2/lib"
# SAN here switches the sanitizer steps of `test`; the Makefile's own SAN (an AddressSanitizer
# build in build-san/) must not see it, or build/ gets no binaries.
SAN_STEPS=${SAN:-1}; unset SAN
# This tree's commit as scripts/device-prepare.sh saw it (the device's .git may be older).
[ -f .dev/tree-commit ] && export RF_COMMIT="$(cat .dev/tree-commit)"
echo "tree: ${RF_COMMIT:-$(git describe --always --dirty --abbrev=8 2>/dev/null)}" >> "$OUT/summary.txt"
make -j16 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
grep -E "warning" "$OUT/build.log" | head -5
BIN=build/rocmforge

# model_file TAG-TYPE (1b-q4_0, 7b-f16, ...): f = its mkmodel file under /tmp/rfm, made on first use
# (the issue's 1B and Llama-2-7B shapes, random weights, the Llama 2 vocabulary).
model_file() {
    local tag=${1%%-*} t=${1#*-} shape
    if [ $tag = 1b ]; then shape="--n-embd 2048 --n-layer 16 --n-head 32 --n-head-kv 8 --n-ff 8192"
    else shape="--n-embd 4096 --n-layer 32 --n-head 32 --n-ff 11008"; fi
    mkdir -p /tmp/rfm; f=/tmp/rfm/$1.gguf
    [ -f $f ] || $BIN mkmodel -o $f --vocab .dev/shared/vocab/ggml-vocab-llama-spm.gguf --type $t $shape 2>>"$OUT/mkmodel.log"
}

for stage in "$@"; do
case $stage in
test)
    make -j16 build/tests/test_model >> "$OUT/build.log" 2>&1
    log "make test-gpu"
    make test-gpu 2>&1 | tee "$OUT/test-gpu.log" | grep -E "passed|FAIL" | tail -20 | tee -a "$OUT/summary.txt"
    log "model tests on the GPU (test_model with ROCMFORGE_TEST_DEVICE=gpu)"
    ROCMFORGE_TEST_DEVICE=gpu build/tests/test_model > "$OUT/test-model-gpu.log" 2>&1
    grep -E " gpu |FAIL|RESULT|batched" "$OUT/test-model-gpu.log" | tee -a "$OUT/summary.txt"
    [ "$SAN_STEPS" = 0 ] && continue
    # Sanitizers on the kernel groups with reduced shapes (racecheck on the sampler's full sort
    # is too slow for one call, so the groups are split).
    for spec in "memcheck kernels" "racecheck embed,rmsnorm,rope,attention,elementwise" "racecheck sampler,graph"; do
        set -- $spec
        log "compute-sanitizer $1 on test_gpu_ops $2"
        ROCMFORGE_GPU_QUICK=1 compute-sanitizer --tool $1 --report-api-errors no --error-exitcode 9 build/tests/test_gpu_ops $2 \
            > "$OUT/sanitizer-$1-${2%%,*}.log" 2>&1
        echo "exit $? ; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|RESULT' "$OUT/sanitizer-$1-${2%%,*}.log" | tail -2 | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
    done
    log "compute-sanitizer memcheck on test_gpu_matmul"
    compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_gpu_matmul > "$OUT/sanitizer-matmul.log" 2>&1
    echo "exit $? ; $(grep -E 'ERROR SUMMARY|RESULT' "$OUT/sanitizer-matmul.log" | tail -2 | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
    ;;
bench|bench7b)
    nvcc -O2 -o build/gpu_bandwidth tools/gpu_bandwidth.cu && build/gpu_bandwidth 4 | tee -a "$OUT/summary.txt"
    if [ $stage = bench ]; then tag=1b; types="${TYPES:-f16 q8_0 q4_0 q4_k_m}"
    else tag=7b; types="${TYPES7:-f16 q8_0 q4_0 q4_k_m}"; fi
    for t in $types; do
        model_file $tag-$t
        log "bench $tag $t ($(stat -c %s $f) bytes)"
        $BIN bench -m $f -p 512 -n 128 -r ${REPS:-3} 2>>"$OUT/bench-err.log" | tee -a "$OUT/bench.md" | grep "^| " | tail -2 | tee -a "$OUT/summary.txt"
    done
    ;;
mm)
    log "stand-alone matmul test + decode A/B"
    sh bench/gpu_mm_build.sh build/gpumm > "$OUT/mm-build.log" 2>&1 || tail -20 "$OUT/mm-build.log"
    build/gpumm/test_gpu_matmul > "$OUT/test-gpu-matmul.log" 2>&1
    grep -E "FAIL|RESULT|passed" "$OUT/test-gpu-matmul.log" | tail -12 | tee -a "$OUT/summary.txt"
    build/gpumm/bench_gpu_matmul ${MM_ITERS:-20} ab > "$OUT/mm-ab.txt" 2>&1; cat "$OUT/mm-ab.txt" >> "$OUT/summary.txt"
    ;;
ncu)
    log "ncu of the decode matvec, 11008x4096"
    [ -x build/gpumm/bench_gpu_matmul ] || sh bench/gpu_mm_build.sh build/gpumm > "$OUT/mm-build.log" 2>&1
    # one call shape per type (bench_gpu_matmul one TYPE N_OUT N_IN), the third k_mvp launch profiled
    for k in ${NCU_TYPES:-q4_K q4_0 q8_0 f16}; do
        ncu --kernel-name-base mangled -k regex:k_mvp -s 2 -c 1 --section SpeedOfLight --section Occupancy \
            --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
            build/gpumm/bench_gpu_matmul 3 one $k 11008 4096 > "$OUT/ncu-$k.txt" 2>&1
        grep -E "Duration|DRAM Throughput|No Eligible|Achieved Occupancy|Warp Cycles Per Issued|This stall type" \
            "$OUT/ncu-$k.txt" | head -12 >> "$OUT/summary.txt"
    done
    ;;
tgab)
    for ft in ${AB_FILES:-1b-q4_k_m}; do
        model_file $ft
        for envset in ${AB_ENVS:-RF_MM_MVP=0 RF_MM_PDL_GRAPH=0 RF_MM_PDL=0 X=default}; do
            log "tg128 $ft $envset"
            env $envset $BIN bench -m $f -p 0 -n 128 -r ${REPS:-2} 2>>"$OUT/bench-err.log" | grep "^| " | tail -1 | tee -a "$OUT/summary.txt"
        done
    done
    ;;
bound)
    rm -f build-bound/obj/src/backend/gpu/*.cu.o # (the flags may differ from the last call's)
    make -j16 BUILD=build-bound NVCCFLAGS="${BOUND_FLAGS:--DRF_BOUND_NODOT}" RF_COMMIT="${RF_COMMIT:-tree}-bound" build-bound/rocmforge \
        > "$OUT/bound-build.log" 2>&1 || { tail -20 "$OUT/bound-build.log"; continue; }
    for ft in ${AB_FILES:-7b-q4_0 7b-q4_k_m}; do
        model_file $ft
        for rep in $(seq 1 ${ALT:-2}); do
            for b in build build-bound; do
                log "tg128 $ft $b (alternation $rep)"
                $b/rocmforge bench -m $f -p 0 -n 128 -r ${REPS:-2} 2>>"$OUT/bench-err.log" | grep "^| " | tail -1 | tee -a "$OUT/summary.txt"
            done
        done
    done
    ;;
vsbase)
    [ -d .dev/snap ] || { echo "vsbase: no .dev/snap (scripts/device-prepare.sh snap REV)"; continue; }
    ( cd .dev/snap && make -j16 BUILD="$OLDPWD/build-base" RF_COMMIT="$(cat .commit 2>/dev/null || echo snapshot)" \
        "$OLDPWD/build-base/rocmforge" ) > "$OUT/build-base.log" 2>&1 ||
        { tail -20 "$OUT/build-base.log"; continue; }
    for ft in ${AB_FILES:-7b-q4_k_m}; do
        model_file $ft
        for rep in $(seq 1 ${ALT:-2}); do
            for b in build-base build; do
                log "tg128 $ft $b (alternation $rep)"
                $b/rocmforge bench -m $f -p 0 -n 128 -r ${REPS:-2} 2>>"$OUT/bench-err.log" | grep "^| " | tail -1 | tee -a "$OUT/summary.txt"
            done
        done
    done
    ;;
trace)
    CUPTI_DIR=${CUPTI_DIR:-$PWD/.dev/cupti}
    nvcc -shared -Xcompiler -fPIC -I/usr/local/cuda/extras/CUPTI/include -o build/kernel_trace.so tools/kernel_trace.c -L"$CUPTI_DIR" -lcupti \
        -Xlinker -rpath,"$CUPTI_DIR" > "$OUT/trace-build.log" 2>&1 || { cat "$OUT/trace-build.log"; continue; }
    for ft in ${TRACE_FILES:-1b-f16 7b-q4_0 7b-q4_k_m}; do
        model_file $ft
        log "trace tg128 $ft"
        CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so RF_TRACE_OUT="$OUT/trace-$ft.txt" \
            $BIN bench -m $f -p 0 -n 128 -r 1 2>>"$OUT/bench-err.log" | grep "^| " | tail -1 | tee -a "$OUT/summary.txt"
        python3 scripts/trace_summary.py "$OUT/trace-$ft.txt" 2>&1 | head -12 | tee -a "$OUT/summary.txt"
    done
    ;;
stamps)
    make -j16 BUILD=build-stamps NVCCFLAGS=-DRF_PHASE_STAMPS CFLAGS="$CFLAGS -DRF_PHASE_STAMPS" \
        build-stamps/rocmforge > "$OUT/stamps-build.log" 2>&1 || { tail -20 "$OUT/stamps-build.log"; continue; }
    for ft in ${STAMP_FILES:-7b-q4_0 1b-f16}; do
        model_file $ft
        log "phase stamps tg128 $ft"
        mkdir -p /tmp/stamps-$ft
        RF_STAMPS_OUT=/tmp/stamps-$ft build-stamps/rocmforge bench -m $f -p 0 -n 128 -r 1 2>>"$OUT/bench-err.log" |
            grep "^| " | tail -1 | tee -a "$OUT/summary.txt"
        python3 scripts/phase_timeline.py /tmp/stamps-$ft/stamps-*.bin > "$OUT/timeline-$ft.txt" 2>&1
        python3 scripts/phase_blocks.py /tmp/stamps-$ft/stamps-*.bin > "$OUT/blocks-$ft.txt" 2>&1
        tail -8 "$OUT/timeline-$ft.txt" | tee -a "$OUT/summary.txt"
    done
    ;;
longctx)
    for ft in 1b-f16 7b-q4_k_m; do
        model_file $ft; tag=${ft%%-*}; t=${ft#*-}
        for d in 512 8192 32768; do
            for kv in ${KVTYPES:-f16}; do
                log "tg128 at depth $d, $tag $t, K/V cache $kv"
                $BIN bench -m $f -p 0 -n 128 -d $d -b 2048 -r 2 -ctk $kv 2>>"$OUT/bench-err.log" | tee -a "$OUT/bench.md" | grep "^| " | tail -1 | tee -a "$OUT/summary.txt"
            done
        done
    done
    ;;
esac
done
# Everything but the summary in one archive (the device returns a limited number of files).
# (written beside $OUT first: a tar of the folder it writes into can exit non-zero, and then nothing
# was deleted and the device returned none of the files past its count limit)
tgz=$(mktemp /tmp/rf-results.XXXXXX)
tar czf "$tgz" -C "$OUT" --exclude ./summary.txt . && find "$OUT" -type f ! -name summary.txt -delete && mv "$tgz" "$OUT/results.tgz"
