#!/bin/sh
# Copies what device runs need from ../shared into .dev/shared (git-ignored; pass `.dev` in the
# device tool's carry list).
set -e
src="${ROCMFORGE_SHARED:-../shared}"
mkdir -p .dev/shared/vocab
cp -r "$src/models" "$src/golden" .dev/shared/
cp "$src/vocab/ggml-vocab-llama-spm.gguf" .dev/shared/vocab/
# The device image has no PCRE2 headers: carry the header and the static library.
mkdir -p .dev/pcre2/include .dev/pcre2/lib
cp /usr/include/pcre2.h .dev/pcre2/include/
cp /usr/lib/x86_64-linux-gnu/libpcre2-8.a .dev/pcre2/lib/
du -sh .dev
