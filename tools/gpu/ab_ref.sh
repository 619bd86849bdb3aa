#!/usr/bin/env bash
# Puts the source tree of a git revision (default: main) in .abref.tar.gz (~0.5 MiB: only what
# the hibana binary needs, no tests, models, benchmarks or tools), for tools/gpu/check.sh's `ab`
# stage to unpack, build on the GPU machine beside the working tree and benchmark against it in
# the same session. Run here, then carry it: run(carry=[".devdeps", ".abref.tar.gz"],
# command="source .devdeps/activate.sh && tools/gpu/check.sh ab tests"). (The tree sent to the
# GPU machine must stay under ~64 MB, and the working tree alone is ~54.)
# Usage: tools/gpu/ab_ref.sh [REV] [DIR]: DIR .abref by default; .abref-NAME for the trees of
# check.sh's AB_MORE. .gitignore keeps both out of git.
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=$(git rev-parse --verify "${1:-main}^{commit}")
dir=${2:-.abref}
case "$dir" in .abref | .abref-*) ;; *) echo "DIR must be .abref or .abref-NAME" >&2; exit 2 ;; esac
rm -rf "$dir" "$dir.tar.gz"
mkdir "$dir"
git archive "$rev" | tar -x -C "$dir" --exclude=models --exclude=tests --exclude=bench \
  --exclude=docs --exclude=tools
echo "$rev" >"$dir/REF"
tar -czf "$dir.tar.gz" -C "$dir" .
rm -rf "$dir"
echo "reference $(git log -1 --format='%h %s' "$rev") in $dir.tar.gz ($(du -sh "$dir.tar.gz" | cut -f1))"
