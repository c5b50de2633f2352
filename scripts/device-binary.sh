#!/bin/sh
# Builds the CLI here for sm_90 (the H100 / H200) and leaves a stripped, gzipped copy in .dx/ for a
# device run to carry, so an A/B of kernel variants spends no device time on builds:
#   sh scripts/device-binary.sh NAME [NVCC flags...]   ->  .dx/rf-NAME.gz (build dir build-dev-NAME/)
# e.g. `sh scripts/device-binary.sh base` and `sh scripts/device-binary.sh bound -DRF_BOUND_NODOT`,
# then on the device: `gunzip -c .dx/rf-bound.gz > /tmp/rf-bound` (carry [".dx"]). The GPU objects
# are rebuilt every time (make does not see a change of flags); PCRE2 is linked statically from
# .dev/pcre2 (scripts/device-prepare.sh), since the device image has no libpcre2.
set -e
[ $# -ge 1 ] || { echo "usage: sh scripts/device-binary.sh NAME [NVCC flags...]" >&2; exit 2; }
name=$1; shift
[ -f .dev/pcre2/lib/libpcre2-8.a ] || { echo "device-binary: no .dev/pcre2 (run sh scripts/device-prepare.sh first)" >&2; exit 1; }
b=build-dev-$name
mkdir -p $b && rm -f $b/obj/src/backend/gpu/*.cu.o
make -j"$(nproc)" CUDA_ARCHS=90 BUILD=$b NVCCFLAGS="$*" RF_COMMIT="$(git describe --always --dirty --abbrev=8)-$name" \
    LDFLAGS="-L$PWD/.dev/pcre2/lib" $b/rocmforge > $b/build.log 2>&1 || { tail -20 $b/build.log >&2; exit 1; }
mkdir -p .dx
# .dx/ stays out of git (the exclude file's path also works in a linked worktree, where .git is a file)
ex=$(git rev-parse --git-path info/exclude)
grep -qx '/.dx/' "$ex" 2>/dev/null || { mkdir -p "$(dirname "$ex")" && echo '/.dx/' >> "$ex"; }
strip -o .dx/rf-$name $b/rocmforge && gzip -f .dx/rf-$name
ls -l .dx/rf-$name.gz
