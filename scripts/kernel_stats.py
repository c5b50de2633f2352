#!/usr/bin/env python3
"""Registers, spills and SASS size of each kernel of one CUDA source, without a GPU.

    python3 scripts/kernel_stats.py src/backend/gpu/attention_decode_mma.cu [REGEX] [-- NVCC FLAGS...]

Compiles the file for sm_90 (CUDA_ARCH=NN to change) to a cubin with `ptxas -v`, then prints, for
each kernel whose mangled name matches REGEX (default: every kernel), the registers and spill
bytes ptxas reports and the instructions of its .text section (readelf; 16 bytes each on sm_70+).
A change shared by several template instances can move one of them across a register cap (one
block per SM less) while the others shrink: run this before and after, then measure on a GPU."""
import os, re, subprocess, sys, tempfile

def main():
    args = sys.argv[1:]
    extra = []
    if '--' in args:
        i = args.index('--')
        args, extra = args[:i], args[i + 1:]
    if not args:
        sys.exit(__doc__)
    src, pat = args[0], re.compile(args[1] if len(args) > 1 else '.')
    arch = os.environ.get('CUDA_ARCH', '90')
    nvcc = os.environ.get('NVCC', '/usr/local/cuda/bin/nvcc' if os.path.exists('/usr/local/cuda/bin/nvcc') else 'nvcc')
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, 'k.cubin')
        r = subprocess.run([nvcc, '-std=c++17', '-O2', '-cubin', f'-gencode=arch=compute_{arch},code=sm_{arch}',
                            '-Iinclude', '-Isrc', '-DRF_HAVE_CUDA', '-Xptxas', '-v', *extra, src, '-o', cubin],
                           capture_output=True, text=True)
        if r.returncode:
            sys.exit(r.stderr[-4000:])
        sizes = {}
        elf = subprocess.run(['readelf', '-SW', cubin], capture_output=True, text=True).stdout
        for line in elf.splitlines():
            m = re.search(r'\.text\.(\S+)\s+\S+\s+\S+\s+\S+\s+([0-9a-f]+)', line)
            if m:
                sizes[m.group(1)] = int(m.group(2), 16) // 16
    stats, cur = {}, None
    for line in r.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r'(\d+) bytes spill stores, (\d+) bytes spill loads', line)
        if m and cur:
            stats.setdefault(cur, {})['spill'] = f'{m.group(1)}/{m.group(2)}'
        m = re.search(r'Used (\d+) registers', line)
        if m and cur:
            stats.setdefault(cur, {})['regs'] = m.group(1)
    print(f"{'kernel (mangled)':70s} {'instr':>6s} {'regs':>5s}  spill st/ld")
    for k in sorted(sizes):
        if pat.search(k):
            st = stats.get(k, {})
            print(f"{k[:70]:70s} {sizes[k]:6d} {st.get('regs', '?'):>5s}  {st.get('spill', '?')}")

if __name__ == '__main__':
    main()
