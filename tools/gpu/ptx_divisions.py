#!/usr/bin/env python3
"""Where a CUDA source's kernels divide in 64 bits, from its PTX (no GPU needed).

A 64-bit integer division or remainder has no instruction: ptxas expands it into a long
sequence (tens of dependent instructions). In a kernel's loop it costs issue slots (the tiled
matmul's split and scale-block bookkeeping, the prefill attention's page lookups: the
thirty-seventh slice of docs/benchmarks.md); after its wait for the previous kernel
(griddepcontrol.wait, pdl_wait) it sits on the decode step's chain of dependent kernels.

Compiles each FILE to PTX for sm_90 with the build's flags and prints, per kernel that has
any, the div/rem.s64/u64 sites before and after its first griddepcontrol.wait, and those
inside loops (between a label and a branch back to it), most first.

Usage: tools/gpu/ptx_divisions.py src/backend/cuda/attention.cu [FILE ...] [--nvcc PATH]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

DIV = re.compile(r"\b(div|rem)\.(s|u)64\b")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return out.stdout.splitlines() if out.returncode == 0 else names


def kernels(ptx):
    """Yields (mangled name, lines) for each .entry of a PTX text."""
    name, body = None, []
    for line in ptx.splitlines():
        m = re.match(r"\s*(?:\.visible\s+)?\.entry\s+(\S+?)\(", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif name:
            body.append(line)
    if name:
        yield name, body


def count(body):
    """(before the wait, after it, inside a loop) division sites of one kernel's lines."""
    labels, branches = {}, []
    for i, line in enumerate(body):
        m = re.match(r"\s*(\$\w+):", line)
        if m:
            labels[m.group(1)] = i
        m = re.search(r"\bbra(?:\.uni)?\s+(\$\w+);", line)
        if m:
            branches.append((i, m.group(1)))
    loops = [(labels[t], i) for i, t in branches if t in labels and labels[t] < i]
    wait = next((i for i, l in enumerate(body) if "griddepcontrol.wait" in l), None)
    before = after = looped = 0
    for i, line in enumerate(body):
        if not DIV.search(line):
            continue
        if wait is not None and i > wait:
            after += 1
        else:
            before += 1
        looped += any(a <= i <= b for a, b in loops)
    return before, after, looped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--nvcc", default=os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc"))
    args = ap.parse_args()
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    flags = ["-DNDEBUG", "-I" + os.path.join(root, "src"), "-O3", "-arch=sm_90",
             "--expt-relaxed-constexpr", "-std=c++17", "-ptx"]
    rows = []
    for f in args.files:
        with tempfile.NamedTemporaryFile(suffix=".ptx") as out:
            r = subprocess.run([args.nvcc, *flags, "-o", out.name, f], capture_output=True,
                               text=True)
            if r.returncode != 0:
                sys.exit(f"{f}: nvcc failed\n{r.stderr}")
            ptx = open(out.name).read()
        for name, body in kernels(ptx):
            before, after, looped = count(body)
            if before + after:
                rows.append((looped, after, before, os.path.basename(f), name))
    rows.sort(reverse=True)
    names = demangle([r[4] for r in rows])
    print("in loops  after wait  before wait  file: kernel")
    for (looped, after, before, f, _), name in zip(rows, names):
        name = re.sub(r"hibana::cuda::(\w+::)?(\(anonymous namespace\)::)?", "", name)
        print(f"{looped:8}  {after:10}  {before:11}  {f}: {name[:110]}")


if __name__ == "__main__":
    main()
