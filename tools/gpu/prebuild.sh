#!/usr/bin/env bash
# Builds hibana here, on a machine without a GPU (nvcc compiles the kernels), for the device
# tool to run without building there (a build of two variants took most of a ten-minute call):
# a lean configuration (sm_90; no MPI, NCCL or libcurl, so the binaries need only what the GPU
# machine and .devdeps hold), one build per EDITS line ("LABEL SED": a sed -E script applied to
# FILE, gemv_kernel.cuh by default; LABEL alone: the source as it is), packed as
# .prebuilt/LABEL.tar.xz: hibana, and with TESTS=1 the CUDA test binaries under tests/ too
# (they find their fixtures at this checkout's path, which the GPU machine must link to its
# copy: pending.sh's unpack does). Carry .prebuilt and .devdeps; there, after unpacking,
#   source .devdeps/activate.sh && BINS="orig=.prebuilt/orig/hibana ..." tools/gpu/check.sh bins
# A call carries 64 MiB in all and the tracked tree is ~54 MB, 45 of them the embedded model
# (models/hibana-tiny/*.safetensors, which no device stage reads): move those out of the tree
# while the call is sent, and back after.
# Usage: TESTS=1 EDITS="orig
# paired s/^(constexpr bool kPairStages = )false;/\1true;/" tools/gpu/prebuild.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build-dev
f=${FILE:-src/backend/cuda/gemv_kernel.cuh}
: "${EDITS:?EDITS=\"LABEL SED\" lines}"
[ -f $B/build.ninja ] || cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DHIBANA_BENCH=OFF \
  -DHIBANA_MPI=OFF -DHIBANA_NCCL=OFF -DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON \
  -DHIBANA_CUDA_ARCHS=90 >/dev/null
tests=""
[ "${TESTS:-0}" = 1 ] && tests="tests/backend_tests tests/model_tests tests/engine_tests"
mkdir -p .prebuilt
pwd >.prebuilt/SOURCE_DIR  # (where the test binaries look for their fixtures)
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
  # shellcheck disable=SC2086  # (the targets, one word each)
  ninja -C $B -j"${HIBANA_JOBS:-2}" hibana ${tests//tests\//}
  # shellcheck disable=SC2086
  tar -cf - -C $B hibana $tests | xz -T2 -6 >.prebuilt/$label.tar.xz
done <<<"$EDITS"
ls -l .prebuilt
