#!/usr/bin/env python3
"""Where one replayed decode step's time goes with its kernels overlapping as they do in the
graph (programmatic dependent launch on), from Nsight Systems' kernel trace
(`nsys stats --report cuda_gpu_trace --format csv` of `nsys profile --cuda-graph-trace=node`;
tools/gpu/check.sh timeline). Nsight Compute's step profile (ncu_step.py) times each kernel
alone; this one takes them as they ran.

  nsys_step.py TRACE.csv [--kernels N] [--against BASE.csv]

The step is the kernels from the last embedding launch on. Each kernel's "critical" time is
what it added to the step's span: the part of it that ends after every kernel started before
it had ended. The groups are printed heaviest first by that time, then the step's first N
kernels (60) in order: start and end relative to the step, duration, and critical time — read
down that column, it is the chain of a layer's kernels.

--against BASE.csv (another build's trace of the same step, check.sh timeline-ab) prints
instead each group's critical time in both, largest change first: where one build's step
gained or lost its time.
"""
import argparse
import collections
import csv


def rows(path):
    with open(path) as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if "Start" in l and "Name" in l)
    out = []
    for r in csv.DictReader(lines[start:]):
        name = r.get("Name", "")
        if not name or "[CUDA mem" in name:
            continue
        start_ns = int(float(r.get("Start (ns)", "0").replace(",", "")))
        dur = int(float(r.get("Duration (ns)", "0").replace(",", "")))
        grid = "({},{},{})".format(r.get("GrdX", "?"), r.get("GrdY", "?"), r.get("GrdZ", "?"))
        out.append((start_ns, dur, name, grid))
    out.sort()
    return out


def short(name):
    for anon in ("void ", "<unnamed>::", "(anonymous namespace)::"):
        name = name.replace(anon, "")
    depth = 0
    for i, ch in enumerate(name):  # the arguments start at the first "(" outside "<>"
        depth += (ch == "<") - (ch == ">")
        if ch == "(" and depth == 0:
            name = name[:i]
            break
    base = name
    tmpl = ""
    if "<" in base:
        base, tmpl = base.split("<", 1)
        tmpl = tmpl.rsplit(">", 1)[0]
    for noise in ("hibana::cuda::", "(bool)", "(Elt)", "(int)"):
        tmpl = tmpl.replace(noise, "")
    return base.split("::")[-1] + (f"<{tmpl[:60]}>" if tmpl else "")


def step_groups(path):
    """The step's span, kernel count, kernel time and per-group [calls, time, critical, gaps]
    (ns), and the timeline (start, duration, critical, group); None without a step."""
    ks = rows(path)
    last = max((i for i, k in enumerate(ks) if "embedding" in k[2]), default=0)
    step = ks[last:]
    if not step:
        return None
    t0 = step[0][0]
    span = max(s + d for s, d, _, _ in step) - t0
    busy = sum(d for _, d, _, _ in step)
    groups = collections.OrderedDict()
    end_so_far = t0
    timeline = []
    for s, d, name, grid in step:
        crit = max(0, s + d - max(end_so_far, s))
        gap = max(0, s - end_so_far)
        key = (short(name), grid)
        g = groups.setdefault(key, [0, 0, 0, 0])
        g[0] += 1
        g[1] += d
        g[2] += crit
        g[3] += gap
        timeline.append((s - t0, d, crit, key))
        end_so_far = max(end_so_far, s + d)
    return span, len(step), busy, groups, timeline


def between_steps(path):
    """Each replayed step's period (one embedding launch to the next) and the GPU's idle time
    between its last kernel's end and the next step's first kernel: what the host's turnaround
    (the summary's copy back, the next step's inputs and graph launch) costs the GPU. Nsight
    Systems' API tracing lengthens the host's part somewhat."""
    ks = rows(path)
    starts = [i for i, k in enumerate(ks) if "embedding" in k[2]]
    periods, idles = [], []
    for a, b in zip(starts, starts[1:]):
        end = max(s + d for s, d, _, _ in ks[a:b])
        periods.append(ks[b][0] - ks[a][0])
        idles.append(ks[b][0] - end)
    if not periods:
        return None
    periods.sort()
    idles.sort()
    return len(periods), periods[len(periods) // 2], idles[len(idles) // 2]


def compare(a, b):
    """Each group's critical time in build b (the base) and a, largest change first."""
    span_a, n_a, _, ga, _ = a
    span_b, n_b, _, gb, _ = b
    print(f"step span: base {span_b / 1e3:.1f} us ({n_b} kernels), this {span_a / 1e3:.1f} us"
          f" ({n_a} kernels), change {(span_a - span_b) / 1e3:+.1f} us")
    print(f"{'base us':>9} {'this us':>9} {'change':>8} {'calls':>11} {'crit/call':>15}"
          f"  kernel grid")
    keys = list(dict.fromkeys(list(gb) + list(ga)))
    zero = [0, 0, 0, 0]
    keys.sort(key=lambda k: -abs(ga.get(k, zero)[2] - gb.get(k, zero)[2]))
    for k in keys:
        (nb, _, cb, _), (na, _, ca, _) = gb.get(k, zero), ga.get(k, zero)
        per_b = f"{cb / nb / 1e3:.2f}" if nb else "-"
        per_a = f"{ca / na / 1e3:.2f}" if na else "-"
        print(f"{cb / 1e3:9.1f} {ca / 1e3:9.1f} {(ca - cb) / 1e3:+8.1f} {nb:5d}/{na:<5d}"
              f" {per_b:>7}/{per_a:<7}  {k[0]} {k[1]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--kernels", type=int, default=60)
    ap.add_argument("--against", help="another build's trace of the same step (the base)")
    a = ap.parse_args()
    this = step_groups(a.trace)
    if this is None:
        print("no kernels")
        return
    if a.against:
        base = step_groups(a.against)
        if base is None:
            print("no kernels in the base trace")
            return
        compare(this, base)
        return
    span, n, busy, groups, timeline = this
    gaps = sum(g[3] for g in groups.values())
    print(f"one step: {n} kernels, span {span / 1e3:.1f} us, kernel time {busy / 1e3:.1f}"
          f" us (overlap {busy / span:.2f}x), idle gaps {gaps / 1e3:.1f} us")
    steps = between_steps(a.trace)
    if steps:
        print(f"between steps ({steps[0]} periods, medians): period {steps[1] / 1e3:.1f} us, GPU"
              f" idle from a step's last kernel to the next one's first {steps[2] / 1e3:.1f} us")
    print(f"{'crit us':>9} {'share':>6} {'calls':>5} {'us/call':>8} {'crit/call':>9}"
          f" {'gap/call':>8}  kernel grid")
    for (name, grid), (n, d, c, gp) in sorted(groups.items(), key=lambda kv: -kv[1][2]):
        print(f"{c / 1e3:9.1f} {c / span * 100:5.1f}% {n:5d} {d / n / 1e3:8.2f} {c / n / 1e3:9.2f}"
              f" {gp / n / 1e3:8.2f}  {name} {grid}")
    print(f"\nthe step's first {a.kernels} kernels in order")
    print(f"{'start us':>9} {'end us':>9} {'dur us':>8} {'crit us':>8}  kernel grid")
    for start, d, crit, (name, grid) in timeline[: a.kernels]:
        print(f"{start / 1e3:9.2f} {(start + d) / 1e3:9.2f} {d / 1e3:8.2f} {crit / 1e3:8.2f}"
              f"  {name} {grid}")


if __name__ == "__main__":
    main()
