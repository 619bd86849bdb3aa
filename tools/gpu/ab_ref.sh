#!/usr/bin/env bash
# Puts the source tree of a git revision (default: main) in .abref/, for tools/gpu/check.sh's
# `ab` stage to build on the GPU machine beside the working tree and benchmark against it in the
# same session. Run here, then carry it: run(carry=[".devdeps", ".abref"], command="source
# .devdeps/activate.sh && tools/gpu/check.sh ab tests"). Only what the hibana binary needs
# (no tests, models or benchmarks sources: a few MiB).
# Usage: tools/gpu/ab_ref.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=$(git rev-parse --verify "${1:-main}^{commit}")
rm -rf .abref
mkdir .abref
git archive "$rev" | tar -x -C .abref --exclude=models --exclude=tests --exclude=bench \
  --exclude=docs
echo "$rev" >.abref/REF
echo "reference $(git log -1 --format='%h %s' "$rev") in .abref ($(du -sh .abref | cut -f1))"
