#!/bin/sh
# Stand-alone build of the GPU matmul test and benchmark (independent of mk/gpu.mk), CUDA:
#   sh bench/gpu_mm_build.sh [outdir]      -> outdir/test_gpu_matmul, outdir/bench_gpu_matmul
# GPU_ARCH overrides the -gencode list (default sm_80 + sm_90); NVCC_EXTRA adds nvcc flags (e.g.
# -DMVP_MIN_BLOCKS=4, matmul.cu's build-time knobs).
set -e
OUT=${1:-build-gpumm}
ARCH=${GPU_ARCH:-"-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90"}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$OUT"
nvcc -std=c++17 -O2 -Isrc -Iinclude -Xcompiler -Wall,-Wextra $ARCH ${NVCC_EXTRA:-} -c src/backend/gpu/matmul.cu -o "$OUT/matmul.o"
CF="-std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -Iinclude -Isrc -Itests/common -DRF_HAVE_CUDA"
for f in src/core/quant.c src/core/dtype.c src/core/util.c tests/common/test.c; do
    cc $CF -c "$f" -o "$OUT/$(basename "$f" .c).o"
done
LIBS="-L$CUDA_HOME/lib64 -lcudart -ldl -lm -lpthread -lstdc++"
cc $CF -o "$OUT/test_gpu_matmul" tests/test_gpu_matmul.c "$OUT/matmul.o" "$OUT/quant.o" "$OUT/dtype.o" "$OUT/util.o" "$OUT/test.o" $LIBS
if [ -f bench/bench_gpu_matmul.c ]; then
    cc $CF -o "$OUT/bench_gpu_matmul" bench/bench_gpu_matmul.c "$OUT/matmul.o" "$OUT/quant.o" "$OUT/dtype.o" "$OUT/util.o" "$OUT/test.o" $LIBS
fi
