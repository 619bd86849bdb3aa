#!/usr/bin/env bash
# Puts the source tree of a git revision (default: main) in .abref/, for tools/gpu/check.sh's
# `ab` stage to build on the GPU machine beside the working tree and benchmark against it in the
# same session. Run here, then carry it: run(carry=[".devdeps", ".abref"], command="source
# .devdeps/activate.sh && tools/gpu/check.sh ab tests"). Only what the hibana binary needs
# (no tests, models or benchmarks sources: a few MiB).
# Usage: tools/gpu/ab_ref.sh [REV] [DIR]: DIR (.abref by default; .abref-NAME for the trees of
# check.sh's AB_MORE, which .gitignore keeps out of git too: those go as DIR.tar.gz, ~0.5 MiB,
# that stage ab unpacks, since the tree sent to the GPU machine must stay under 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=$(git rev-parse --verify "${1:-main}^{commit}")
dir=${2:-.abref}
case "$dir" in .abref | .abref-*) ;; *) echo "DIR must be .abref or .abref-NAME" >&2; exit 2 ;; esac
rm -rf "$dir"
mkdir "$dir"
git archive "$rev" | tar -x -C "$dir" --exclude=models --exclude=tests --exclude=bench \
  --exclude=docs
echo "$rev" >"$dir/REF"
if [ "$dir" != .abref ]; then
  rm -rf "$dir/tools" "$dir.tar.gz"
  tar -czf "$dir.tar.gz" -C "$dir" .
  rm -rf "$dir"
  dir=$dir.tar.gz
fi
echo "reference $(git log -1 --format='%h %s' "$rev") in $dir ($(du -sh "$dir" | cut -f1))"
