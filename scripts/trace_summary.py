#!/usr/bin/env python3
"""Summarises a tools/kernel_trace.c trace of decode steps.

  python3 scripts/trace_summary.py TRACE [--skip N]

A step starts at each embedding kernel launched from a graph. For every kernel (named by its
demangled name without arguments, and its grid size, which tells the matvec shapes apart):
calls per step, mean duration, and mean "advance": how far the kernel moved the end of the step's
timeline past every kernel before it (end - max(previous ends), at least 0). Durations overlap
under programmatic dependent launches; advances add up to the step's span, so they are each
kernel's share of the step. Also: the span of a step (first start to last end) and the gap from
its last kernel to the next step's first (host round trip: token copy, launch).
"""
import re
import subprocess
import sys
from collections import defaultdict


def short_names(mangled):
    out = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True).stdout.split("\n")
    names = {}
    for m, d in zip(mangled, out):
        d = re.sub(r"\(.*$", "", d)  # arguments
        d = re.sub(r"^(void|static) ", "", d)
        names[m] = d
    return names


def main():
    path = sys.argv[1]
    skip = int(sys.argv[sys.argv.index("--skip") + 1]) if "--skip" in sys.argv else 2
    kernels = []
    for line in open(path):
        f = line.split()
        if f[0] == "K":
            kernels.append((int(f[1]), int(f[2]), int(f[3]), int(f[4]), f[6]))
    kernels.sort()
    names = short_names(sorted({k[4] for k in kernels}))
    steps, cur = [], None
    for k in kernels:
        if k[2] == 0:  # not from a graph: load, prefill, warm-up outside graphs
            continue
        if "embed" in names[k[4]]:
            cur = []
            steps.append(cur)
        if cur is not None:
            cur.append(k)
    steps = steps[skip:-1] if len(steps) > skip + 1 else steps
    if not steps:
        print("no graph steps found")
        return
    adv, dur, cnt = defaultdict(float), defaultdict(float), defaultdict(int)
    spans, gaps = [], []
    for i, s in enumerate(steps):
        end = s[0][0]
        for st, en, _, gx, m in s:
            key = "%s [grid %d]" % (names[m], gx)
            adv[key] += max(0, en - end)  # idle time before a kernel is charged to it
            dur[key] += en - st
            cnt[key] += 1
            end = max(end, en)
        spans.append(end - s[0][0])
    for a, b in zip(steps, steps[1:]):
        gaps.append(b[0][0] - max(k[1] for k in a))
    n = len(steps)
    span = sum(spans) / n
    gap = sum(gaps) / len(gaps) if gaps else 0.0
    print("%d steps: span %.1f us, gap to the next step %.1f us, step + gap %.1f us (%.1f tokens/s)"
          % (n, span / 1e3, gap / 1e3, (span + gap) / 1e3, 1e9 / (span + gap)))
    print("%-70s %6s %9s %9s %9s %6s" % ("kernel [grid]", "calls", "dur us", "adv us", "adv/step", "share"))
    for key in sorted(adv, key=lambda k: -adv[k]):
        c = cnt[key] / n
        print("%-70s %6.0f %9.2f %9.2f %9.1f %5.1f%%" % (key[:70], c, dur[key] / cnt[key] / 1e3,
              adv[key] / cnt[key] / 1e3, adv[key] / n / 1e3, 100 * adv[key] / n / span))


if __name__ == "__main__":
    main()
