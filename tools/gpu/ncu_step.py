#!/usr/bin/env python3
"""Per-kernel GPU time of one replayed decode step, from an ncu --csv run of `hibana bench decode
--steps 1` (tools/gpu/check.sh profile). The step is the kernels after the last embedding launch.
Prints kernels grouped by name and grid, heaviest first, with their share of the step."""
import collections
import csv
import sys

lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))  # after the program's output
rows = [r for r in csv.DictReader(lines[start:]) if r.get("Metric Name") == "gpu__time_duration.sum"]
last = max((i for i, r in enumerate(rows) if "embedding_kernel" in r["Kernel Name"]), default=0)
step = rows[last:]
groups = collections.OrderedDict()
for r in step:
    name = r["Kernel Name"].split("(")[0].split("<")[0].replace("void ", "")
    tmpl = r["Kernel Name"].split("<", 1)[1].split(">(")[0] if "<" in r["Kernel Name"] else ""
    key = (name, tmpl[:60], r["Grid Size"])
    g = groups.setdefault(key, [0, 0.0])
    g[0] += 1
    g[1] += float(r["Metric Value"].replace(",", ""))
total = sum(g[1] for g in groups.values())
print(f"one step: {len(step)} kernels, {total / 1e3:.1f} us of kernel time")
for (name, tmpl, grid), (n, ns) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
    print(f"{ns / total * 100:6.2f}% {ns / 1e3:9.1f} us {n:4d}x {ns / n / 1e3:8.2f} us  {name}<{tmpl}> grid {grid}")
