#!/usr/bin/env python3
"""Summarises tagged decode-benchmark lines (tools/gpu/check.sh stages ab and sweep).

Each input line is `LABEL CONFIG batch context tok/s ms/step GB/step roofline%`, one per run
and batch size; variants run alternately, so each (config, batch) has every label's runs from
the same session. Prints, per (config, batch), each label's runs, their mean, and the mean's
ratio to the first label's (the reference).

Usage: ab_table.py FILE
"""
import sys
from collections import OrderedDict


def main(path):
    runs = OrderedDict()  # (config, batch) -> OrderedDict(label -> [tok/s])
    roof = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 8:
                continue
            label, config, batch = parts[0], parts[1], parts[2]
            try:
                toks = float(parts[4])
            except ValueError:
                continue
            runs.setdefault((config, batch), OrderedDict()).setdefault(label, []).append(toks)
            roof.setdefault((config, batch, label), []).append(parts[7])
    if not runs:
        print("no benchmark lines in", path)
        return 1
    print(f"{'config':<22} {'batch':>5}  {'variant':<34} {'tok/s (runs)':<26} {'mean':>8} {'ratio':>7}")
    for (config, batch), by_label in runs.items():
        ref = None
        for label, vals in by_label.items():
            mean = sum(vals) / len(vals)
            ref = mean if ref is None else ref
            each = " / ".join(f"{v:.1f}" for v in vals)
            print(f"{config:<22} {batch:>5}  {label:<34} {each:<26} {mean:8.1f} {mean / ref:7.3f}"
                  f"  ({roof[(config, batch, label)][-1]} of roofline)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
