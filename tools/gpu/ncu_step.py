#!/usr/bin/env python3
"""Per-kernel GPU time of one replayed decode step, from an ncu --csv run of `hibana bench decode`
(tools/gpu/check.sh profile). The step is the kernels after the last embedding launch.

  ncu_step.py STEP.csv           kernels grouped by name and grid, heaviest first, with their
                                 share of the step
  ncu_step.py BEFORE.csv AFTER.csv
                                 the two steps side by side per kernel group (calls, us per
                                 call), largest change of time per step first: which kernels a
                                 change made faster or slower (check.sh profile-ab)
"""
import collections
import csv
import sys


def step_groups(path):
    """(kernels in the step, {(name, template, grid): [calls, ns]} in launch order)."""
    lines = open(path).read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))  # after the output
    rows = [r for r in csv.DictReader(lines[start:])
            if r.get("Metric Name") == "gpu__time_duration.sum"]
    last = max((i for i, r in enumerate(rows) if "embedding_kernel" in r["Kernel Name"]),
               default=0)
    step = rows[last:]
    groups = collections.OrderedDict()
    for r in step:
        name = r["Kernel Name"].split("(")[0].split("<")[0].replace("void ", "")
        tmpl = r["Kernel Name"].split("<", 1)[1].split(">(")[0] if "<" in r["Kernel Name"] else ""
        g = groups.setdefault((name, tmpl[:60], r["Grid Size"]), [0, 0.0])
        g[0] += 1
        g[1] += float(r["Metric Value"].replace(",", ""))
    return len(step), groups


def label(key):
    name, tmpl, grid = key
    return f"{name}<{tmpl}> grid {grid}"


def one(path):
    n, groups = step_groups(path)
    total = sum(g[1] for g in groups.values())
    print(f"one step: {n} kernels, {total / 1e3:.1f} us of kernel time")
    for key, (calls, ns) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"{ns / total * 100:6.2f}% {ns / 1e3:9.1f} us {calls:4d}x {ns / calls / 1e3:8.2f} us"
              f"  {label(key)}")


def diff(before, after):
    (na, a), (nb, b) = step_groups(before), step_groups(after)
    ta, tb = sum(g[1] for g in a.values()), sum(g[1] for g in b.values())
    print(f"before: {na} kernels, {ta / 1e3:.1f} us; after: {nb} kernels, {tb / 1e3:.1f} us;"
          f" change {(tb - ta) / 1e3:+.1f} us of kernel time per step")
    print(f"{'change us':>10} {'before':>16} {'after':>16}  kernel")
    keys = list(a) + [k for k in b if k not in a]
    def cell(g):
        return f"{g[0]:4d}x {g[1] / g[0] / 1e3:8.2f}" if g else f"{'-':>14}"
    for key in sorted(keys, key=lambda k: -abs(b.get(k, [0, 0.0])[1] - a.get(k, [0, 0.0])[1])):
        ga, gb = a.get(key), b.get(key)
        change = (gb[1] if gb else 0.0) - (ga[1] if ga else 0.0)
        print(f"{change / 1e3:+10.1f} {cell(ga):>16} {cell(gb):>16}  {label(key)}")


if __name__ == "__main__":
    if len(sys.argv) == 2:
        one(sys.argv[1])
    elif len(sys.argv) == 3:
        diff(sys.argv[1], sys.argv[2])
    else:
        print(__doc__)
        sys.exit(2)
