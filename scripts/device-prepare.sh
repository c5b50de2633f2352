#!/bin/sh
# Copies what device runs need from ../shared into .dev/shared (git-ignored; pass `.dev` in the
# device tool's carry list), and a snapshot of HEAD into .dev/snap: the device receives the whole
# working tree, other engineers' uncommitted edits included, so a run that must measure a commit
# builds the snapshot:  cd .dev/snap && ln -sfn ../../.dev .dev && bash scripts/device-run.sh ...
# (`sh scripts/device-prepare.sh snap [REV]` refreshes only the snapshot, of REV, default HEAD;
# `scripts/device-run.sh vsbase` measures the working tree against it).
set -e
# The working tree's commit, for the device's builds of it (the device's copy of .git can be
# older than the files it receives; scripts/device-run.sh exports this as RF_COMMIT).
mkdir -p .dev && git describe --always --dirty --abbrev=8 > .dev/tree-commit
rm -rf .dev/snap && mkdir -p .dev/snap && git archive "${2:-HEAD}" | tar -x -C .dev/snap
git rev-parse --short=8 "${2:-HEAD}" > .dev/snap/.commit # its builds' commit (git describe there names this tree's)
# git archive dates the files to the commit: make on a warm device would keep older objects
find .dev/snap -type f -exec touch {} +
[ "${1:-}" = snap ] && exit 0
src="${ROCMFORGE_SHARED:-../shared}"
mkdir -p .dev/shared/vocab
cp -r "$src/models" "$src/golden" .dev/shared/
cp "$src/vocab/ggml-vocab-llama-spm.gguf" .dev/shared/vocab/
# The device image has no PCRE2 headers: carry the header and the static library.
mkdir -p .dev/pcre2/include .dev/pcre2/lib
cp /usr/include/pcre2.h .dev/pcre2/include/
cp /usr/lib/x86_64-linux-gnu/libpcre2-8.a .dev/pcre2/lib/
du -sh .dev
