#!/usr/bin/env bash
# The GPU work still owed (docs/benchmarks.md, "Not measured yet"), as device calls of under ten
# minutes each: `tools/gpu/pending.sh 4` (racecheck on the batch-invariance tests not yet covered),
# `5` (Nsight Compute of the 80B's decode attention and of the tiled matmul), `6` and `8` (on an
# H200: the slices since the seventeenth against a3628f5, the step's timeline and profile), `10`
# (every CUDA test, the official figures, then the twenty-eighth slice's split targets against the
# old ones: on an H200), `15` (10 from binaries built here by tools/gpu/prebuild.sh), `16` (prefill
# products by cuBLASLt beside the tiled kernel), `17` (the prefill switches: cuBLASLt rows,
# tensor-core attention, one-term experts), `18` (the fp8 weight ring per warp, on an H200), `19`
# (a354107's grouped launches and the prefill in passes), `20` (the prefill products by cuBLASLt
# with two activation terms against three), `21` (on an H200: every test, the official decode
# figures, 20's prefill), `22` (the call after 21: 4096-token prefill passes, then 18), `23` (21's
# tests, the experts' Nsight Compute, memcheck and 4096-token passes on any GPU), `31` (first:
# every test on this tree, two-term expert rows against three), `33` (every test, the tiled
# kernel's empty token tiles skipped against run; ran in the thirty-ninth slice), `37` (first
# after the forty-second slice: every test, the chunked summaries timed, the split). The calls
# already run are in git history (8b5f87f has the forty-second slice's 36, 9742c14 the fortieth
# slice's 34 and 121d7c5 its 35,
# 7c95594 the thirty-ninth slice's 32, c5a4f25 the
# thirty-eighth slice's 29 and 30, 9c77857 its 27 and 28, d723e6a the thirty-seventh slice's
# 24-26, 5675f6a 1-13, 450dc27 14-19, c91cf02 9 and 11, fd0689d
# the thirtieth slice's call 12; call 17, op_chain's graph-ctr way, ran on 0f5e0ad in the
# twenty-fourth slice; 9 on 0e5461a, 11 on f7d7872, the thirtieth slice's 12 on fd0689d, the
# thirty-first slice's racecheck call 4 on 611d1dd; the thirty-third slice's 4 (memcheck), 7, 11, 12
# and 16 on 9a098a3, from prebuilt binaries as calls 13, 14 and 16; the thirty-fifth slice's 17 on
# cba2479, on an H100; the thirty-sixth slice's 21 (less the 8B's figures), 20's goldens and 19's
# passes on 7ad98bc, on an H100).
# Logs under $OUT. The 80B fp8 shape needs an H200 for batch 32 and 64 (its weights fill an 80
# GB H100 to 172 MiB).
# Usage on the device: source .devdeps/activate.sh && tools/gpu/pending.sh 8
set -u
B=build-gpu
: "${OUT:?OUT must name a folder}"

# The eighteenth and nineteenth slices (the 6 KiB fp8 ring, routing at batch 1 by one warp) on
# the H200 against the tree before both (here, first: tools/gpu/ab_ref.sh a3628f5, then carry
# .abref.tar.gz), every CUDA test; then (7) the smaller fp8 rings (4 and 5 KiB, 1 KiB stages).
call6() {
  ROUNDS=1 BATCHES=1,8,32,64 timeout 420 tools/gpu/check.sh ab 2>&1 | tail -18
  timeout 150 tools/gpu/check.sh tests 2>&1 | tail -4
}
# The 80B step on the H200 as it overlaps (timeline: .devdeps needs libdw1 and libelf1, see
# check.sh) and each kernel alone (profile), then op_chain's release points: at the end,
# before the wait, after it (the engine's way). (HIBANA_CUDA_RELEASE_BEFORE_WAIT=1 was timed on
# an H100 in the nineteenth slice: 0.968 at batch 1; it stays off.)
call8() {
  [ -x build-gpu/hibana ] || timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  LINES_SHOWN=40 timeout 100 tools/gpu/check.sh timeline 2>&1 | tail -40
  BATCH=8 LINES_SHOWN=20 timeout 100 tools/gpu/check.sh timeline 2>&1 | tail -20
  PROFILE="qwen3-next-80b-a3b fp8" SHAPES=none timeout 300 tools/gpu/check.sh profile 2>&1 | tail -40
  timeout 100 tools/gpu/check.sh chain 2>&1 | grep -E '^(bare|graph)|DIFFER|NaN'
}

# ncu_stalls NAME REGEX CMD...: Nsight Compute's full sections for the first kernel whose
# demangled name matches REGEX after 20 such launches (the name base is the demangled name:
# "tiled_kernel" alone also names attention's tiled kernel), its headline figures and stall
# reasons.
ncu_stalls() {
  local name=$1 regex=$2
  shift 2
  local r=$OUT/$name
  timeout ${NCU_TIMEOUT:-80} ncu --set full --kernel-name-base demangled -k "regex:$regex" --launch-skip ${SKIP:-20} \
    --launch-count 1 -o $r "$@" >$r.log 2>&1
  ncu --import $r.ncu-rep --page details >$r.details.txt 2>&1
  ncu --import $r.ncu-rep --page source --print-source sass --csv >$r.csv 2>&1
  echo "== $name: $(grep -m1 -E '^  [a-z].*\(' $r.details.txt | cut -c1-100)"
  rm -f $r.ncu-rep
  grep -E "^ +(Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Registers Per Thread) " $r.details.txt
  python3 tools/gpu/ncu_source.py $r.csv --top 10 >$r.txt 2>&1
  sed -n "/^stall/,/^regions/p" $r.txt | head -16
  [ "${REGIONS:-0}" = 1 ] && sed -n "/^regions/,/^top/p" $r.txt | head -9
  rm -f $r.csv
}

# sanitize TOOL BINARY FILTER SECONDS: compute-sanitizer's TOOL over the tests FILTER names,
# under its own timeout (racecheck multiplies a kernel's time by hundreds: give it a few tests a
# run), its log under $OUT; one line: the exit status, the tests passed and skipped, the summary.
sanitize() {
  local log="$OUT/$1_$(echo "$3" | tr -c a-zA-Z0-9_ _ | cut -c1-60).log"
  timeout "$4" compute-sanitizer --tool "$1" --error-exitcode 9 "$B/tests/$2" --gtest_filter="$3" \
    >"$log" 2>&1
  echo "$1 $3: rc=$? ok $(grep -c '^\[       OK \]' "$log") skipped $(grep -c '^\[  SKIPPED \]' \
    "$log") $(grep -E 'SUMMARY|hazard' "$log" | head -2 | tr '\n' ' ')"
}
# compute-sanitizer on what it has not covered (thirty-first slice: racecheck is clean on the
# chunked DeltaNet's test at every head shape, its kernels filtered at the 80B's, on every
# golden parity test and on 9 of the batch-invariance tests of qwen3_moe and qwen3_fp8;
# thirty-third: memcheck clean on every golden, racecheck on qwen3_fp8's graph replays and on
# two batch-invariance tests of each model below, cut off at 90 s a model): racecheck on the
# rest of each model's batch-invariance tests, one test a run. The carried build if there is one.
call4() {
  [ -d .prebuilt ] && use_prebuilt orig
  [ -x $B/tests/model_tests ] || timeout 200 tools/gpu/check.sh build 2>&1 | tail -2
  local m t
  for m in qwen3_dense qwen3_next qwen3_5 qwen3_5_moe; do
    for t in AnySplitMatchesInRecurrentMode LessSharedMemoryKeepsTheBits \
      SnapshotsResumeAnyPosition DecodeStepsReplayedAsGraphsMatchOpByOp; do
      sanitize racecheck model_tests "Fixtures/BatchInvariance.$t/${m}_cuda" 34
    done
  done
}
# Nsight Compute of the 80B's decode attention at batch 1 and 4k positions (its tensor-core
# kernel and its merge; the f32 split kernel's profile is in the forty-first slice), then of the
# matmul's tiled kernel with and without pre-split activations.
call5() {
  [ -x $B/hibana ] || timeout 200 tools/gpu/check.sh build 2>&1 | tail -2
  local k
  for k in decode_mma_kernel attention_merge_kernel; do
    NCU_TIMEOUT=150 ncu_stalls "$k" "$k" $B/hibana bench decode --device cuda --load-format dummy \
      --config bench/configs/qwen3-next-80b-a3b.json --dtype fp8 --batch 1 --context 4096
  done
  for v in HIBANA_CUDA_TILED_PRESPLIT=0 ""; do
    (
      [ -z "$v" ] || export "$v"
      ncu_stalls "tiled_$(echo "${v:-default}" | tr -c a-zA-Z0-9 _)" 'mm::.*tiled_kernel' \
        $B/hibana bench prefill --device cuda --load-format dummy \
        --config bench/configs/qwen3-8b.json --dtype bf16 --prompt-tokens 4096
    )
  done
}

# The official figures on an H200 (the 80B's batch 32 and 64 need its memory) after every CUDA
# test, then the split targets by element type against the old ones (264 / 8 tiles: the tree
# before e1ea06d), and the down projection's early weight stream off (0.957 at batch 1 on the
# H100, twenty-ninth slice).
call10() {  # (its own timeouts: under the ten minutes of a call in all)
  timeout 200 tools/gpu/check.sh build tests 2>&1 | tail -5
  figures10
}
figures10() {
  BATCHES=1,8,32,64 timeout 150 tools/gpu/check.sh bench-80b 2>&1 | grep -vE "^\s*$" | tail -7
  BATCHES=1,8,32,64 timeout 90 tools/gpu/check.sh bench-8b 2>&1 | grep -vE "^\s*$" | tail -7
  local old="HIBANA_CUDA_SPLIT_TILES=264 HIBANA_CUDA_GROUPED_SPLIT_TILES=8"
  VARIANTS="base;$old;HIBANA_CUDA_GROUPED_PREFETCH=0" CONFIGS=qwen3-next-80b-a3b:fp8 ROUNDS=2 \
    BATCHES=1,8 timeout 140 tools/gpu/check.sh sweep 2>&1 | tail -8
}

# Binaries built here (tools/gpu/prebuild.sh; carry .prebuilt and .devdeps): each
# .prebuilt/LABEL.tar.xz into .prebuilt/LABEL/, and this copy of the tree linked where the
# test binaries look for their fixtures (the path of the checkout that built them).
unpack_prebuilt() {
  local t src
  for t in .prebuilt/*.tar.xz; do
    mkdir -p "${t%.tar.xz}" && tar -xJf "$t" -C "${t%.tar.xz}" || return 1
  done
  src=$(cat .prebuilt/SOURCE_DIR)
  [ "$src" = "$PWD" ] || [ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; }
}
# use_prebuilt LABEL: its hibana and tests in $B, where the stages look for them (unpacked once).
use_prebuilt() {
  [ -d .prebuilt/$1 ] || unpack_prebuilt || return 1
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  mkdir -p $B/tests && cp .prebuilt/$1/hibana $B/ && cp .prebuilt/$1/tests/* $B/tests/
}
# Call 10 on the carried default build (on an H200).
call15() {
  use_prebuilt orig || return 1
  timeout 200 tools/gpu/check.sh tests 2>&1 | tail -4
  figures10
}
# The prefill products by cuBLASLt against the tiled kernel (the carried default build).
call16() {
  use_prebuilt orig || return 1
  timeout 300 tools/gpu/check.sh cublas 2>&1 | grep -vE "^\s*$"
}
# The prefill rows by cuBLASLt (matmul_cublas.cu, thirty-third slice; HIBANA_CUDA_CUBLAS_PREFILL,
# off by default; 1: one bf16 term of the activations, 3: three), their attention on tensor
# cores (attention_mma.cu, thirty-fourth; HIBANA_CUDA_MMA_ATTENTION, off; 1: one bf16 term of
# each operand, 3: two) and their MoE experts' rows with one term (HIBANA_CUDA_GROUPED_PREFILL,
# off), from the carried default build: their tests, the 8k-token prefill of both shapes with
# none, all three at 1 and at 3 (the op times say what each took), every CUDA test, then the
# model and engine tests with all three on.
call17() {
  use_prebuilt orig || return 1
  timeout 90 $B/tests/backend_tests --gtest_filter='CudaPrefillRows*:CudaAttention.PrefillBlocks*' \
    --gtest_brief=1 2>&1 | grep -E "Failure|Expected|Which|PASSED|FAILED|SKIPPED|bits|rows|mma" |
    head -40
  prefill17 "0 0 0" "1 1 1"
  KNOBS="HIBANA_CUDA_CUBLAS_PREFILL=1 HIBANA_CUDA_MMA_ATTENTION=1 HIBANA_CUDA_GROUPED_PREFILL=1" \
    timeout 120 tools/gpu/check.sh tests-knobs 2>&1 | tail -10
  timeout 150 tools/gpu/check.sh tests 2>&1 | tail -8
  prefill17 "3 3 1"
  KNOBS="HIBANA_CUDA_CUBLAS_PREFILL=3 HIBANA_CUDA_MMA_ATTENTION=3 HIBANA_CUDA_GROUPED_PREFILL=1" \
    timeout 120 tools/gpu/check.sh tests-knobs 2>&1 | tail -10
}
# The fp8 decode matmul's weight ring per warp on the H200: 6 KiB (the source's) against 8 and 10
# (each a build here: EDITS "ring8 /RingPerWarp = /s/(Elt::fp8 \? )[0-9]+ << 10/\18 << 10/" and
# ring10 the same, TESTS=0). The 6 KiB ring won on an H100 (eighteenth slice); an H200 streams
# 1.40 times as fast, so it may want more bytes in flight per warp. An `async` build beside them
# is taken too where one was carried (762f768's single host round trip, measured on an H100:
# build `orig` before it to compare).
call18() {
  unpack_prebuilt || return 1
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local b bins=""
  for b in orig ring8 ring10 async; do [ -x .prebuilt/$b/hibana ] && bins="$bins $b=.prebuilt/$b/hibana"; done
  BINS="${bins# }" CONFIGS=qwen3-next-80b-a3b:fp8 ROUNDS=2 BATCHES=1,8 \
    timeout 500 tools/gpu/check.sh bins 2>&1 | tail -12
}
# a354107 and 0c9bd12 from the carried default build (`TESTS=1 EDITS=orig tools/gpu/prebuild.sh`):
# the MoE tests (the batch of 40 with every group by the batch kernels), then the 8k-token
# prefill of both shapes at the defaults in one pass (the 80B's did not fit an 80 GB H100
# before a354107), in the server's 512-token passes and in 2048-token ones (what a larger
# --step-tokens would give a long prompt).
call19() {
  use_prebuilt orig || return 1
  timeout 60 $B/tests/backend_tests --gtest_filter='CudaOps.Moe*' --gtest_brief=1 2>&1 | tail -3
  prefill_chunks 0 512 2048
}
# The prefill products by cuBLASLt with two bf16 terms of the activations
# (HIBANA_CUDA_CUBLAS_PREFILL=2) against the default three, from the carried default build: the
# cuBLASLt tests (1, 2 and 3 terms), the 8k-token prefill of both shapes at 3 and 2, then the
# model and engine tests at 2 (the goldens' 1e-3 held at 3 and failed at 1: 0.044).
call20() {
  use_prebuilt orig || return 1
  timeout 60 $B/tests/backend_tests --gtest_filter='CudaPrefillRows*' --gtest_brief=1 2>&1 |
    grep -E "Failure|Expected|Which|PASSED|FAILED|SKIPPED|terms" | head -20
  prefill17 "3 1 0" "2 1 0"
  KNOBS="HIBANA_CUDA_CUBLAS_PREFILL=2" timeout 150 tools/gpu/check.sh tests-knobs 2>&1 | tail -10
}
# One H200 call from the carried default build: every CUDA test, the 80B's official decode
# figures, call 20's prefill at three and two terms, the 8B's decode figures. Then 22.
call21() {
  use_prebuilt orig || return 1
  timeout 200 tools/gpu/check.sh tests 2>&1 | tail -4
  BATCHES=1,8,32,64 timeout 150 tools/gpu/check.sh bench-80b 2>&1 | grep -vE "^\s*$" | tail -7
  prefill17 "3 1 0" "2 1 0"
  BATCHES=1,8,32,64 timeout 90 tools/gpu/check.sh bench-8b 2>&1 | grep -vE "^\s*$" | tail -7
}
# The second H200 call after 21: the model and engine tests at two cuBLASLt terms, then 18.
# Call 22 (after 21): the 8B's and the 80B's 8k-token prefill in the 4096-token passes a
# prompt alone takes, then 18's fp8 rings (memcheck of the goldens at the two-term default ran
# on an H100 in the thirty-seventh slice).
call22() {
  use_prebuilt orig || return 1
  prefill_chunks 4096
  call18
}
# Where the H200 does not come (any GPU): 21's tests, Nsight Compute of the experts' prefill
# launches, 22's memcheck and 4096-token passes.
call23() {
  use_prebuilt orig || return 1
  timeout 200 tools/gpu/check.sh tests 2>&1 | tail -4
  experts_ncu
  sanitize memcheck model_tests 'Fixtures/GoldenTest.*_cuda' 150
  prefill_chunks 4096
}
# Any GPU: every CUDA test on this tree, then the 80B's 8k prefill in 4096- and 512-token passes
# at the default (two terms) against three, two rounds (ran in the fortieth slice).
call31() {
  use_prebuilt orig || return 1
  timeout 200 tools/gpu/check.sh tests 2>&1 | tail -4
  prefill_ab HIBANA_CUDA_GROUPED_PREFILL "3 2" qwen3-next-80b-a3b fp8 4096 512
}
# Any GPU: every CUDA test on this tree, then the 80B's 8k prefill in 512- and 4096-token
# passes and the 8B's in 4096 with the tiled kernel's empty token tiles run (=0) and skipped
# (HIBANA_CUDA_TILED_SKIP=1), two rounds (ran on dc2e01f: thirty-ninth slice).
call33() {
  use_prebuilt orig || return 1
  timeout 200 tools/gpu/check.sh tests 2>&1 | tail -4
  prefill_ab HIBANA_CUDA_TILED_SKIP "0 1" qwen3-next-80b-a3b fp8 512 4096
  prefill_ab HIBANA_CUDA_TILED_SKIP "0 1" qwen3-8b bf16 4096
}
# prefill_ab KNOB "V1 V2 ..." CONFIG DTYPE CHUNK...: CONFIG's 8k-token prefill (dummy weights) in
# passes of each CHUNK tokens with KNOB at each value in turn, two rounds: tok/s and the op
# times of the experts and the products.
prefill_ab() {
  local knob=$1 values=$2 cfg=$3 dt=$4 round chunk v
  local lines='prefill [0-9]+ tokens|moe_(route_)?experts|matmul|ran short|error'
  shift 4
  for round in 1 2; do
    for chunk in "$@"; do
      for v in $values; do
        echo "$cfg, passes of $chunk, $knob=$v: $(env HIBANA_CUDA_TIMING=1 "$knob=$v" \
          timeout 60 $B/hibana bench prefill --device cuda --load-format dummy \
          --config bench/configs/$cfg.json --dtype $dt --prompt-tokens 8192 --chunk $chunk 2>&1 |
          grep -E "$lines" | cut -c1-64 | tr '\n' ' ')"
      done
    done
  done
}
# Nsight Compute of the MoE experts' grouped tiled launches in an 8k-token prefill (56% of the
# 80B's prefill in 4096-token passes, thirty-seventh slice; grouped and pre-split, the
# default: ncu demangles the template's bools as (bool)1): the 80B's shapes cut to 4 layers (the same launches, a fraction of the memory ncu's
# replay may have to save), layer 2's gate/up (launch 4 of the run) and its down projection.
experts_ncu() {
  python3 -c "import json; c = json.load(open('bench/configs/qwen3-next-80b-a3b.json'));
c['num_hidden_layers'] = 4; json.dump(c, open('/tmp/next4.json', 'w'))" || return 1
  local skip
  for skip in 4 5; do
    SKIP=$skip NCU_TIMEOUT=150 ncu_stalls "experts_tiled_$skip" \
      'mm::.*tiled_kernel<.*\(bool\)1, \(bool\)1>' \
      $B/hibana bench prefill --device cuda --load-format dummy --config /tmp/next4.json \
      --dtype fp8 --prompt-tokens 8192
  done
}
# prefill_chunks CHUNK...: the 8k-token prefill of both shapes in passes of each CHUNK tokens.
prefill_chunks() {
  local c chunk chunks=("$@")
  for c in "qwen3-next-80b-a3b fp8" "qwen3-8b bf16"; do
    for chunk in "${chunks[@]}"; do
      set -- $c
      HIBANA_CUDA_TIMING=1 timeout 90 $B/hibana bench prefill --device cuda --load-format dummy \
        --config bench/configs/$1.json --dtype $2 --prompt-tokens 8192 --chunk $chunk 2>&1 |
        grep -E "prefill [0-9]+ tokens|matmul|attention|moe|error" | head -7
    done
  done
}
# prefill17 "CUBLAS MMA GROUPED"...: the 8k-token prefill of both shapes with those switches.
prefill17() {
  local v c variants=("$@")
  for c in "qwen3-8b bf16" "qwen3-next-80b-a3b fp8"; do
    for v in "${variants[@]}"; do
      set -- $c $v
      echo "$1: CUBLAS_PREFILL=$3 MMA_ATTENTION=$4 GROUPED_PREFILL=$5"
      HIBANA_CUDA_CUBLAS_PREFILL=$3 HIBANA_CUDA_MMA_ATTENTION=$4 HIBANA_CUDA_GROUPED_PREFILL=$5 \
        HIBANA_CUDA_TIMING=1 timeout 40 $B/hibana bench prefill --device cuda --load-format dummy \
        --config bench/configs/$1.json --dtype $2 --prompt-tokens 8192 2>&1 |
        grep -E "prefill [0-9]+ tokens|matmul|attention|moe|error" | head -8
    done
  done
}

# Any GPU, first after the forty-second slice: every CUDA test on this tree (8b5f87f's chunked
# logits summaries never ran on a GPU; CudaSampling.* is their test), then the summaries
# against the one-CTA kernel, greedy and as a sampled request's (k 20 at 0.7), two rounds: `old`
# is this tree with 8b5f87f^'s sampling.cu, built here as
#   git show 8b5f87f^:src/backend/cuda/sampling.cu >src/backend/cuda/sampling.cu &&
#   TESTS=1 EDITS=old tools/gpu/prebuild.sh && git checkout src/backend/cuda/sampling.cu &&
#   TESTS=1 EDITS=orig tools/gpu/prebuild.sh
# then the 80B's timeline (nsys_step.py now prints the GPU's idle time between steps: the host's
# turnaround) and the decode attention's split at 128, 64 and 32 with the tensor-core kernel.
call37() {
  use_prebuilt orig || return 1
  timeout 170 tools/gpu/check.sh tests 2>&1 | tail -4
  local r b a
  for r in 1 2; do
    for b in old orig; do
      for a in "" "--summary-k 20 --temperature 0.7"; do
        echo "$b ${a:-greedy}"
        timeout 60 .prebuilt/$b/hibana bench decode --device cuda --load-format dummy \
          --config bench/configs/qwen3-next-80b-a3b.json --dtype fp8 --batch 1,8 --context 4096 \
          --steps 24 $a 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ "
      done
    done
  done
  LINES_SHOWN=4 timeout 100 tools/gpu/check.sh timeline 2>&1 | head -6
  KNOB=HIBANA_CUDA_ATTENTION_SPLIT VALUES="128 64 32" ROUNDS=2 BATCHES=1,8 \
    CONFIGS="qwen3-next-80b-a3b:fp8 qwen3-8b:bf16" timeout 240 tools/gpu/check.sh sweep 2>&1 |
    tail -10
}

case "${1:-}" in
  4) call4 ;;
  5) call5 ;;
  6) call6 ;;
  8) call8 ;;
  10) call10 ;;
  15) call15 ;;
  16) call16 ;;
  17) call17 ;;
  18) call18 ;;
  19) call19 ;;
  20) call20 ;;
  21) call21 ;;
  22) call22 ;;
  23) call23 ;;
  31) call31 ;;
  33) call33 ;;
  37) call37 ;;
  *) echo "usage: $0 4|5|6|8|10|15|16|17|18|19|20|21|22|23|31|33|37" >&2; exit 2 ;;
esac
