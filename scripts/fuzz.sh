#!/bin/sh
# Fuzzes what a model file reaches (tools/fuzz_model.c: GGUF reader, tokenizer, hyperparameters,
# tensor validation, a first decode on the CPU reference backend) with clang's libFuzzer under
# AddressSanitizer + UndefinedBehaviorSanitizer. Not part of `make test` (it runs until stopped).
#   sh scripts/fuzz.sh [seconds]      (default 600; needs clang with its libFuzzer runtime)
# Seeds: the GGUF files under $ROCMFORGE_SHARED/models and /vocab (default ../shared); the corpus
# grows in build-fuzz/corpus, and an input that crashes is written to build-fuzz/crashes/. Replay
# one with build-fuzz/fuzz_model FILE. The build targets this machine's CPU (-march=native).
set -eu
cd "$(dirname "$0")/.."
SHARED=${ROCMFORGE_SHARED:-$(cd .. && pwd)/shared}
SECS=${1:-600}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
make -j2 BUILD=build-fuzz CC=clang OPT="-O1 -g -fsanitize=fuzzer-no-link $SAN" CFLAGS="-march=native" GPU=none \
    build-fuzz/librocmforge.a
clang -std=c11 -O1 -g -fsanitize=fuzzer $SAN -march=native -D_GNU_SOURCE -Iinclude -Isrc -pthread \
    tools/fuzz_model.c build-fuzz/librocmforge.a -lpcre2-8 -lm -o build-fuzz/fuzz_model
mkdir -p build-fuzz/corpus build-fuzz/crashes
exec build-fuzz/fuzz_model -max_total_time="$SECS" -timeout=30 -rss_limit_mb=4096 -max_len=8000000 \
    -artifact_prefix=build-fuzz/crashes/ build-fuzz/corpus "$SHARED/models" "$SHARED/vocab"
