#!/bin/sh
# Installs what building and testing rocmforge needs, from Debian's packages.
#   build: gcc, make, libpcre2-dev (Unicode regexes of the BPE pre-tokenizers)
#   demo:  curl (downloads stories260K.gguf when no local copy exists)
#   --hip: also hipcc (Debian's ROCm 5.2 HIP compiler, ~1 GB with clang/llvm 15): builds the HIP
#          backend on a machine without nvcc and compile-checks the AMD kernels (CI uses it).
#   The CUDA toolkit is not a Debian package here: when nvcc is present (/usr/local/cuda) the
#   CUDA backend is built, otherwise the build is CPU-only.
set -e
pkgs="build-essential libpcre2-dev curl ca-certificates"
[ "${1:-}" = --hip ] && pkgs="$pkgs hipcc"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
