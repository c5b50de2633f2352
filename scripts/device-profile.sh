#!/usr/bin/env bash
# Per-op GPU time of decode (tg) and prompt (pp) steps, eager (no graphs) so every op is seen.
# Usage: scripts/device-profile.sh TAG:TYPE ...   e.g. 7b:q4_k_m 1b:f16   (results under $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/rf-out}; mkdir -p "$OUT"
export CFLAGS="-I$PWD/.dev/pcre2/include" LDFLAGS="-L$PWD/.dev/pcre2/lib"
make -j16 > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
V=.dev/shared/vocab/ggml-vocab-llama-spm.gguf; M=/tmp/rfm; mkdir -p $M
for spec in "$@"; do
    tag=${spec%%:*}; t=${spec#*:}; f=$M/$tag-$t.gguf
    case $tag in
        1b) shape="--n-embd 2048 --n-layer 16 --n-head 32 --n-head-kv 8 --n-ff 8192" ;;
        7b) shape="--n-embd 4096 --n-layer 32 --n-head 32 --n-ff 11008" ;;
    esac
    [ -f $f ] || build/rocmforge mkmodel -o $f --vocab $V --type $t $shape 2>/dev/null
    for test in "-p 0 -n 64" "-p 512 -n 0"; do
        echo "== $tag $t bench $test (eager, profiled)" | tee -a "$OUT/profile.txt"
        ROCMFORGE_NO_GRAPHS=1 ROCMFORGE_PROFILE=1 build/rocmforge bench -m $f $test -r 1 >> "$OUT/profile.txt" 2>&1
    done
done
grep -E "^==|tg|pp|GPU time|^  [a-z]" "$OUT/profile.txt" | head -150
