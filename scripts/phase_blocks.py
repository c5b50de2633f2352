#!/usr/bin/env python3
"""Why a decode matvec's blocks end apart: the phase stamps of each block against its placement.

  python3 scripts/phase_blocks.py DIR/stamps-*.bin   (matmul, attention, attention_mma)

Reads the records phase_timeline.py reads (src/backend/gpu/phase_stamps.cuh). A matvec instance
(k_mvt / k_mvp, grids of at least 64 blocks) is named with the kernel before it in the stream (o
follows the attention, down the swiglu), since two shapes can share a grid size. Per name, medians
over its instances, us:
  spread        last block end - first block end
  c(end, blk)   correlation of a block's end with its index (the scheduler places blocks in order)
and one line per (nb, rank), medians over the blocks of all instances: the blocks of SMs that held
nb blocks of their instance, rank = order of arrival on the SM (0 first):
  share  % of the blocks;  end  from the instance's first block end (p90 beside it);
  start  from the instance's last release (point 1; negative: resident before it);
  stream  a block's end - its staging end (points 3 - 2): its own streaming time.
"""
import os
import statistics as st
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phase_timeline import NAMES, chunks, window  # noqa: E402  (the stamp records and their instances)


def corr(a, b):
    ma, mb = st.fmean(a), st.fmean(b)
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    if va <= 0 or vb <= 0:
        return 0.0
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (va * vb) ** 0.5


def instances(recs):
    """The matvec instances as (name, blocks), each named with the instance that ended before it."""
    out = [("%s/%d" % (NAMES.get(tag, tag), grid), tag, ch) for tag, grid, ch in chunks(recs)
           if len({r[14] for r in ch}) == grid]  # one whole instance
    out.sort(key=lambda t: max(r[3] for r in t[2]))
    for (pname, _, _), (name, tag, ch) in zip(out, out[1:]):
        if tag in (1, 2) and len(ch) >= 64:
            yield "%s after %s" % (name, pname), ch


def main():
    recs = window(sys.argv[1:])
    if recs is None:
        print("no stamps")
        return
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
