#!/usr/bin/env python3
"""Where one kernel's time goes, from Nsight Compute's source page.

Reads the CSV of `ncu --import REPORT --page source --print-source sass --csv` (one kernel,
profiled with `--set full`) and prints:
  - the stall samples and executed instructions, and the instructions per warp;
  - the opcode mix (executed instructions per warp, by opcode);
  - the stall reasons over all samples;
  - the kernel cut into regions at the first instance of marker instructions (the decode matmul's:
    its first cp.async copy, the wait for the previous kernel, the barrier after the
    activations' split, the main loop's first cp.async wait, the line after the branch back
    to the loop's head), each region's share of the samples and instructions per warp —
    markers a kernel does not have are skipped;
  - the TOP lines with the most samples and their main stall reasons.

Usage: ncu_source.py SOURCE.csv [--top N]
(tools/gpu/check.sh source runs it on the products of SHAPES.)
"""
import argparse
import collections
import csv
import sys

# (region name, a substring of the SASS line that starts it), in program order.
MARKERS = [
    ("first copy", "LDGSTS"),
    ("wait prev", "ACQBULK"),
    ("barrier", "BAR.SYNC"),
    ("loop+end", "DEPBAR.LE"),  # (split at the loop's last line below)
]


def opcode(source):
    words = source.split()
    if not words:
        return ""
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    rows = list(csv.reader(open(args.csv)))
    # Row 0 names the kernel; row 1 is the header.
    head = next(i for i, r in enumerate(rows) if "Address" in r and "Source" in r)
    hdr, data = rows[head], [r for r in rows[head + 1 :] if len(r) == len(rows[head])]
    if head > 0 and rows[0]:
        print(" ".join(rows[0])[:160])
    col = {name: i for i, name in enumerate(hdr)}
    src, smp, ex = col["Source"], col["Warp Stall Sampling (All Samples)"], col["Instructions Executed"]
    stalls = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    num = lambda r, i: int(float(r[i] or 0))
    samples = sum(num(r, smp) for r in data)
    executed = sum(num(r, ex) for r in data)
    # Warps: the first instruction runs once per warp.
    warps = max(1, num(data[0], ex)) if data else 1
    print(f"samples {samples}, executed {executed} warp instructions, {warps} warps, "
          f"{executed / warps:.0f} per warp")
    if not samples or not executed:
        return

    mix = collections.Counter()
    for r in data:
        mix[opcode(r[src])] += num(r, ex)
    print("\nopcodes (instructions per warp):")
    for op, n in mix.most_common(16):
        print(f"  {op:10s} {n / warps:8.1f}  {100 * n / executed:5.1f}%")

    reasons = collections.Counter()
    for r in data:
        for i in stalls:
            reasons[hdr[i][len("stall_"):]] += num(r, i)
    print("\nstall reasons (share of samples): " + ", ".join(
        f"{k} {100 * v / samples:.1f}%" for k, v in reasons.most_common(8)))

    starts = [(0, "start")]
    for name, needle in MARKERS:
        at = next((i for i, r in enumerate(data) if needle in r[src] and i > starts[-1][0]), None)
        if at is not None:
            starts.append((at, name))
    # The main loop ends at the backward branch to its head: of the branches back to a line at
    # or after the previous region's first (not to themselves: the kernel's closing `BRA` is),
    # the one with the earliest target, the last of those; what follows is the end.
    if starts[-1][1] == "loop+end":
        first, before = starts[-1][0], starts[-2][0]  # (the head may sit just above the wait)
        addr = lambda i: int(data[i][col["Address"]], 16)
        back = []
        for i in range(first, len(data)):
            if opcode(data[i][src]) != "BRA" or "0x" not in data[i][src]:
                continue
            target = int(data[i][src].split("0x")[-1].split()[0], 16)
            if addr(before) <= target < addr(i):
                back.append((target, -i))
        if back:
            starts[-1] = (first, "loop")
            starts.append((-min(back)[1] + 1, "end"))
    starts.append((len(data), None))
    print("\nregions (from the first instance of each marker):")
    for (a, name), (b, _) in zip(starts, starts[1:]):
        s = sum(num(r, smp) for r in data[a:b])
        e = sum(num(r, ex) for r in data[a:b])
        print(f"  {name:11s} lines {a:5d}-{b:5d}  {100 * s / samples:5.1f}% of samples, "
              f"{e / warps:8.1f} instructions per warp")

    print(f"\ntop {args.top} lines by samples:")
    for i in sorted(range(len(data)), key=lambda i: -num(data[i], smp))[: args.top]:
        r = data[i]
        why = sorted(((hdr[j][len("stall_"):], num(r, j)) for j in stalls if num(r, j)),
                     key=lambda x: -x[1])[:3]
        print(f"  {i:5d} {num(r, smp):5d} {num(r, ex) / warps:6.1f}x  {r[src].strip()[:58]:58s} "
              + ", ".join(f"{k} {v}" for k, v in why))


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        sys.exit(0)
