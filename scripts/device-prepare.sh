#!/bin/sh
# Copies what device runs need from ../shared into .dev/shared (git-ignored; pass `.dev` in the
# device tool's carry list).
set -e
src="${ROCMFORGE_SHARED:-../shared}"
mkdir -p .dev/shared/vocab
cp -r "$src/models" "$src/golden" .dev/shared/
cp "$src/vocab/ggml-vocab-llama-spm.gguf" .dev/shared/vocab/
du -sh .dev
