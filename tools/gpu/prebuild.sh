#!/usr/bin/env bash
# Builds hibana here, on a machine without a GPU (nvcc compiles the kernels), for the device
# tool to run without building there (a build of two variants took most of a ten-minute call):
# a lean configuration (sm_90; no tests, MPI, NCCL or libcurl, so the binary needs only what
# the GPU machine and .devdeps hold), one binary per EDITS line ("LABEL SED": a sed -E script
# applied to FILE, gemv_kernel.cuh by default; LABEL alone: the source as it is) into
# .prebuilt/hibana_LABEL. Then carry .prebuilt and .devdeps and run there
#   source .devdeps/activate.sh && BINS="orig=.prebuilt/hibana_orig ..." tools/gpu/check.sh bins
# Usage: EDITS="orig
# paired s/^(constexpr bool kPairStages = )false;/\1true;/" tools/gpu/prebuild.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build-dev
f=${FILE:-src/backend/cuda/gemv_kernel.cuh}
: "${EDITS:?EDITS=\"LABEL SED\" lines}"
[ -f $B/build.ninja ] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DHIBANA_TESTS=OFF \
  -DHIBANA_BENCH=OFF -DHIBANA_MPI=OFF -DHIBANA_NCCL=OFF -DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON \
  -DHIBANA_CUDA_ARCHS=90 >/dev/null
mkdir -p .prebuilt
cp $f $B/prebuild.orig
trap 'cp $B/prebuild.orig $f' EXIT  # (the source as it was, whatever happens)
while read -r label expr; do
  [ -n "$label" ] || continue
  cp $B/prebuild.orig $f
  [ -z "$expr" ] || sed -i -E "$expr" $f
  if [ -n "$expr" ] && cmp -s $f $B/prebuild.orig; then
    echo "$label: the edit changed nothing" >&2
    exit 1
  fi
  ninja -C $B -j"${HIBANA_JOBS:-2}" hibana
  cp $B/hibana .prebuilt/hibana_$label
done <<<"$EDITS"
ls -l .prebuilt
