#!/usr/bin/env python3
"""Why a decode matvec's blocks end apart: the phase stamps of each block against its placement.

  python3 scripts/phase_blocks.py DIR/stamps-matmul.bin DIR/stamps-attention.bin

Reads the records phase_timeline.py reads (src/backend/gpu/phase_stamps.cuh). A matvec instance
(k_mvt / k_mvp, grids of at least 64 blocks) is named with the kernel before it in the stream (o
follows the attention, down the swiglu), since two shapes can share a grid size. Per name, medians
over its instances, us:
  spread        last block end - first block end
  c(end, blk)   correlation of a block's end with its index (the scheduler places blocks in order)
and one line per (nb, rank): the blocks of SMs that held nb blocks of the instance, rank = order of
arrival on the SM (0 first):
  share  % of the blocks;  end  from the instance's first block end (p90 beside it);
  start  from the instance's last release (point 1; negative: resident before it);
  stream  a block's end - its staging end (points 3 - 2): its own streaming time.
"""
import statistics as st
import struct
import sys
from collections import defaultdict

REC = struct.Struct("<6Q6q4I")  # RfStampRec: g[6], c[6], tag, grid, blk, sm
NAMES = {1: "mvt", 2: "mvp", 3: "swiglu", 4: "attn"}


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack_from("<I", b)[0]
    cap = (len(b) - 4) // REC.size
    recs = [REC.unpack_from(b, 4 + i * REC.size) for i in range(min(n, cap))]
    return [r for r in recs if r[0] != 0]


def corr(a, b):
    ma, mb = st.fmean(a), st.fmean(b)
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    if va <= 0 or vb <= 0:
        return 0.0
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (va * vb) ** 0.5


def instances(recs):
    """The matvec instances as (name, blocks), each named with the instance that ended before it."""
    groups = defaultdict(list)
    for r in recs:
        groups[(r[12], r[13])].append(r)
    out = []
    for (tag, grid), rs in groups.items():
        rs.sort(key=lambda r: r[0])
        k = len(rs) // grid
        rs = rs[len(rs) - k * grid:]  # the oldest instance may be cut by the ring
        for i in range(k):
            ch = rs[i * grid:(i + 1) * grid]
            if len({r[14] for r in ch}) == grid:  # one whole instance
                out.append(("%s/%d" % (NAMES.get(tag, tag), grid), tag, ch))
    out.sort(key=lambda t: max(r[3] for r in t[2]))
    for (pname, _, _), (name, tag, ch) in zip(out, out[1:]):
        if tag in (1, 2) and len(ch) >= 64:
            yield "%s after %s" % (name, pname), ch


def main():
    files = [load(p) for p in sys.argv[1:]]
    if not files or not all(files):
        print("no stamps")
        return
    lo = max(min(r[0] for r in rs) for rs in files)  # the window every file covers
    hi = min(max(r[3] for r in rs) for rs in files)
    recs = [r for rs in files for r in rs if r[0] >= lo + 30000 and r[3] <= hi]
    summary = defaultdict(lambda: defaultdict(list))
    ranks = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for name, ch in instances(recs):
        e0 = min(r[3] for r in ch)
        rel = max(r[1] for r in ch)
        summary[name]["spread"].append((max(r[3] for r in ch) - e0) / 1e3)
        summary[name]["c(end, blk)"].append(corr([r[3] for r in ch], [r[14] for r in ch]))
        by_sm = defaultdict(list)
        for r in ch:
            by_sm[r[15]].append(r)
        for rs in by_sm.values():
            rs.sort(key=lambda r: r[0])
            for k, r in enumerate(rs):
                d = ranks[name][(len(rs), k)]
                d["end"].append((r[3] - e0) / 1e3)
                d["start"].append((r[0] - rel) / 1e3)
                d["stream"].append((r[3] - r[2]) / 1e3)
        summary[name]["blocks"].append(len(ch))
    for name in sorted(summary, key=lambda n: -len(summary[n]["spread"])):
        s = summary[name]
        n = len(s["spread"])
        print("%s: %d instances, spread %.2f us, c(end, blk) %.2f" %
              (name, n, st.median(s["spread"]), st.median(s["c(end, blk)"])))
        total = sum(s["blocks"])
        for (nb, k), d in sorted(ranks[name].items()):
            e = sorted(d["end"])
            print("  nb %d rank %d  share %5.1f%%  end %5.2f (p90 %5.2f)  start %6.2f  stream %5.2f" %
                  (nb, k, 100.0 * len(e) / total, st.median(e), e[int(0.9 * (len(e) - 1))],
                   st.median(d["start"]), st.median(d["stream"])))


if __name__ == "__main__":
    main()
