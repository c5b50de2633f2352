#!/usr/bin/env python3
"""Per-kernel phase times of decode steps from the phase stamps (src/backend/gpu/phase_stamps.cuh).

  python3 scripts/phase_timeline.py DIR/stamps-*.bin   (matmul, attention, attention_mma)

Each file holds the last blocks of one kernel file's decode kernels. Only the time window every
file covers is used. A kernel instance is `grid` consecutive blocks (by start time) of one kernel
tag and grid size; instances are ordered by their last block's end, and each is measured against
the end of the instance before it (its predecessor in the stream). Columns, us:
  adv      end - the predecessor's end (the instance's share of the step)
  entry    first block's start (negative: resident before the predecessor ended)
  rel0/1   first / last block past the grid dependency wait
  stage    last block's staging end - last release (x staging; the attention: its loop)
  comp     end - last staging end
  spread   end - the first block's end
  stg_b / cmp_b   medians over blocks of their own staging and remaining times
  first    k_mvt: median time from a block's staging end to its first ring slot ready;
           the decode attention: from its release to q loaded (and rotated)
  w0loop   k_mvt: median time of warp 0's loop; the attention: from q to warp 0's loop end
The stamps themselves slow a step by ~5%: compare phases, not absolute step times. A block writes
its record after its end stamp (an atomic and 128 bytes), so rel0 / rel1 include that write of the
predecessor's last block (0.5-1 us under load).
"""
import statistics as st
import struct
import sys

REC = struct.Struct("<6Q6q4I")  # RfStampRec
NAMES = {1: "mvt", 2: "mvp", 3: "swiglu", 4: "attn"}
COLS = ["adv", "entry", "rel0", "rel1", "stage", "comp", "spread", "stg_b", "cmp_b", "first", "w0loop"]


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack_from("<I", b)[0]
    cap = (len(b) - 4) // REC.size
    recs = [REC.unpack_from(b, 4 + i * REC.size) for i in range(min(n, cap))]
    return [r for r in recs if r[0] != 0]


def chunks(recs):
    """Every kernel instance as (tag, grid, its records): `grid` consecutive blocks (by start) of one
    tag and grid size."""
    groups = {}
    for r in recs:
        groups.setdefault((r[12], r[13]), []).append(r)
    for (tag, grid), rs in groups.items():
        rs.sort(key=lambda r: r[0])
        k = len(rs) // grid
        rs = rs[len(rs) - k * grid:]  # the oldest instance may be cut by the ring
        for i in range(k):
            yield tag, grid, rs[i * grid:(i + 1) * grid]


def window(paths):
    """The records of the stamp files in the time window every file covers (None: no records). A file
    without records (its kernels did not run, or are not instrumented) is named and left out."""
    files = []
    for p in paths:
        rs = load(p)
        if rs:
            files.append(rs)
        else:
            print("no records in %s" % p)
    if not files:
        return None
    lo = max(min(r[0] for r in rs) for rs in files)
    hi = min(max(r[3] for r in rs) for rs in files)
    return [r for rs in files for r in rs if r[0] >= lo + 30000 and r[3] <= hi]


def instances(recs):
    out = []
    for tag, grid, ch in chunks(recs):
        out.append(dict(name="%s/%d" % (NAMES.get(tag, tag), grid), tag=tag,
                        e0=min(r[0] for r in ch), w0=min(r[1] for r in ch), w1=max(r[1] for r in ch),
                        s1=max(r[2] for r in ch), end=max(r[3] for r in ch), endmin=min(r[3] for r in ch),
                        stg=st.median([r[2] - r[1] for r in ch]), cmp=st.median([r[3] - r[2] for r in ch]),
                        first=st.median([r[4] - r[2] for r in ch]) if tag == 1 else
                        st.median([r[4] - r[1] for r in ch]) if tag == 4 and ch[0][4] else 0,
                        w0loop=st.median([r[5] - r[4] for r in ch]) if tag in (1, 4) and ch[0][5] else 0))
    return sorted(out, key=lambda d: d["end"])


def main():
    recs = window(sys.argv[1:])
    if recs is None:
        print("no stamps")
        return
    inst = instances(recs)
    rows = []
    for prev, d in zip(inst, inst[1:]):
        p = prev["end"]
        rows.append((d["name"], [d["end"] - p, d["e0"] - p, d["w0"] - p, d["w1"] - p, d["s1"] - d["w1"],
                                 d["end"] - d["s1"], d["end"] - d["endmin"], d["stg"], d["cmp"], d["first"],
                                 d["w0loop"]]))
    print("%d blocks, %d kernel instances; the last 12 instances:" % (len(recs), len(inst)))
    print("%-12s " % "kernel" + " ".join("%7s" % c for c in COLS))
    for name, v in rows[-12:]:
        print("%-12s " % name + " ".join("%7.2f" % (x / 1e3) for x in v))
    print("medians per kernel over all instances:")
    agg = {}
    for name, v in rows:
        agg.setdefault(name, []).append(v)
    for k, vs in sorted(agg.items(), key=lambda kv: -sum(x[0] for x in kv[1])):
        print("%-12s " % k + " ".join("%7.2f" % (st.median([x[i] for x in vs]) / 1e3) for i in range(len(COLS)))
              + "  (n=%d)" % len(vs))


if __name__ == "__main__":
    main()
