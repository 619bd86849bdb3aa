#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool): builds with CUDA and runs the requested stages,
# writing logs under $OUT. Stages: build, tests, tests-knobs (the model and engine CUDA tests with
# the off-by-default fusions on: KNOBS), sanitize, bench-8b, bench-80b, prefill (PROMPT, CONFIGS),
# serve, tiers (the prefix-cache benchmarks), profile (Nsight Compute breakdown of one decode step),
# timeline (Nsight Systems: one decode step as it overlapped: PROFILE, BATCH), matmul (one product
# per decode shape), chain (tools/gpu/op_chain.cu: a chain of dependent products as a graph of
# kernels or one persistent kernel), chain-sweep (the same with the weight bytes in flight per SM
# swept: TILES, CAPS), ring-sweep (the fp8 decode matmul's weight ring per warp: RINGS), edit-sweep
# (sed-edited builds of a source: EDITS, FILE), bins (carried prebuilt binaries, alternately:
# BINS), cublas (tools/gpu/cublas_gemm.cu: prefill products by cuBLASLt beside hibana's tiled
# kernel), floor (tools/gpu/launch_floor.cu: per-kernel floor
# of empty and bare-read kernels in a graph), stream (tools/gpu/weight_stream.cu: the decode
# matmul's weight reads alone, two layouts and random bytes), alone (tools/gpu/gemv_alone.cu: the
# decode matmul outside hibana beside the weight stream, VARIANTS of it; DTYPE=fp8 for the 80B's
# shapes, e.g. VARIANTS="base f16a bits noconv e4m3"), kernel (Nsight Compute's full sections for
# one kernel of the decode step: KERNEL, SKIP), source (the decode matmul's time by region and
# opcode on SHAPES, tools/gpu/ncu_source.py), sweep (a benchmark knob swept on the decode shapes:
# KNOB, VALUES, CONFIGS, ROUNDS — e.g. KNOB=HIBANA_CUDA_SPLIT_TILES VALUES="264 132 528", or
# HIBANA_CUDA_GROUPED_SPLIT_TILES "16 8 264" with CONFIGS=qwen3-next-80b-a3b:fp8), ab (this tree
# against tools/gpu/ab_ref.sh's reference tree or AB_ENV, alternating runs in one session, with
# ratios, and AB_MORE's trees between; `ab` builds the trees at once, so run it before `tests`),
# serve-decode (decode through the HTTP API beside bench decode: CLIENTS, CONFIGS), profile-ab
# (after ab: both trees' per-kernel step profiles side by side), timeline-ab (after ab: both
# trees' timelines, each kernel group's critical time side by side; the nsys importer needs
# libdw1 and libelf1 in .devdeps).
# TIMING=1 adds the per-op GPU time breakdown to the benchmarks; WHOLE=1 makes the decode
# benchmarks move every logits row to the host (the engine's way before summaries).
# Usage: source .devdeps/activate.sh && tools/gpu/check.sh build tests bench-8b
# (.devdeps, here, before the first call: ../shared/device/pack-debs nlohmann-json3-dev
# libcpp-httplib-dev libcli11-dev libpcre2-dev libutf8proc-dev liburing-dev libxxhash-dev
# libgtest-dev libgmock-dev ninja-build — 5.5 MiB; the tree sent there must stay under 64 MiB,
# so nothing optional such as MPI.)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out}
mkdir -p "$OUT"
B=build-gpu
status=0

stage_build() {
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DHIBANA_BENCH=OFF \
    -DHIBANA_CUDA_ARCHS=90 >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; return 1; }
  cmake --build $B -j16 --target hibana backend_tests model_tests engine_tests >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -60; return 1; }
  echo "build: ok"
}

# The CUDA tests of the given test binaries, with the environment assignments in $1 (may be
# empty) and $2 appended to each log's name.
run_cuda_tests() {
  local knobs=$1 suffix=$2 f='CudaOps*:*cuda*:*Cuda*'
  shift 2
  for t in "$@"; do
    local log="$OUT/$t$suffix.log"
    timeout 300 env $knobs $B/tests/$t --gtest_filter="$f" --gtest_brief=1 >"$log" 2>&1
    local rc=$?
    echo "$t${knobs:+ with $knobs}: rc=$rc $(grep -E '^\[  (PASSED|FAILED) ' "$log" | tr '\n' ' ')"
    [ $rc -eq 0 ] || { grep -E "Failure|FAILED|error|Expected|Which is|differ" "$log" | head -40; status=1; }
  done
}

stage_tests() {
  run_cuda_tests "" "" backend_tests model_tests engine_tests
}

# The model and engine CUDA tests (goldens, graph replays, batch invariance) again with the
# fusions that are off by default switched on (KNOBS), so a switch is known to keep every model's
# tokens before it is measured or made the default.
stage_tests_knobs() {
  run_cuda_tests "${KNOBS:-HIBANA_CUDA_TILED_PRESPLIT=1}" \
    _knobs model_tests engine_tests
}

stage_sanitize() {
  timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/backend_tests \
    --gtest_filter='CudaOps*:CudaAttention*:CudaFusedOps*' --gtest_brief=1 >"$OUT/sanitize_ops.log" 2>&1
  echo "compute-sanitizer ops: rc=$? $(tail -1 "$OUT/sanitize_ops.log")"
  timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/model_tests \
    --gtest_filter='*GoldenTest*qwen3_next_recurrent_cuda:*GoldenTest*qwen3_fp8_recurrent_cuda' \
    --gtest_brief=1 >"$OUT/sanitize_golden.log" 2>&1
  echo "compute-sanitizer golden: rc=$? $(tail -1 "$OUT/sanitize_golden.log")"
  timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/model_tests \
    --gtest_filter='*DecodeStepsReplayedAsGraphs*cuda*' --gtest_brief=1 >"$OUT/sanitize_graphs.log" 2>&1
  echo "compute-sanitizer graphs: rc=$? $(tail -1 "$OUT/sanitize_graphs.log")"
}

# Decode at 4k context for one bench config and dummy dtype: bench_decode NAME DTYPE TIMEOUT.
# decode_run BINARY CONFIG DTYPE TIMEOUT BATCHES: one `bench decode` at 4k context, dummy weights.
decode_run() {
  timeout "$4" "$1" bench decode --device cuda --load-format dummy \
    --config bench/configs/$2.json --dtype "$3" --batch "$5" --context 4096 --steps 16 \
    ${WHOLE:+--whole-logits} 2>&1
}

bench_decode() {
  HIBANA_CUDA_TIMING=${TIMING:-0} decode_run $B/hibana "$1" "$2" "$3" "${BATCHES:-1,8,32,64}" |
    tee "$OUT/bench_$1.log"
}

# Prefill of a PROMPT-token prompt (2048) on the CONFIGS (both shapes); TIMING=1: GPU time per op.
stage_prefill() {
  configs | while read -r cfg dt; do
    HIBANA_CUDA_TIMING=${TIMING:-0} timeout 300 $B/hibana bench prefill --device cuda \
      --load-format dummy --config bench/configs/$cfg.json --dtype $dt --prompt-tokens ${PROMPT:-2048} \
      2>&1 | tee "$OUT/prefill_$cfg.log"
  done
}

# One matmul per 8B decode shape, timed as a replayed graph, as a fraction of copy bandwidth.
stage_matmul() {
  timeout 200 $B/hibana bench matmul --device cuda --dtype ${DTYPE:-bf16} \
    --shapes ${SHAPES:-6144x4096,4096x4096,24576x4096,4096x12288,151936x4096} --batch 1,8,64 \
    2>&1 | tee "$OUT/bench_matmul.log"
}

# Nsight Compute: per-kernel time of one replayed decode step at batch 1 (the 8B shape unless
# PROFILE="CONFIG DTYPE", e.g. "qwen3-next-80b-a3b fp8"): only the third replayed step is
# profiled (HIBANA_CUDA_PROFILE_REPLAY), each graph node as a kernel, caches flushed before each
# (decode reads its weights from DRAM once per step anyway; CACHE=none keeps them, to see what
# a small kernel costs when the previous one left its inputs in L2); then the full sections of
# the batch-1 matmul at the SHAPES (none: skip).
# profile_step CONFIG DTYPE [BINARY [TAG]]: the files are ncu_decode[_TAG]_CONFIG.*.
profile_step() {
  local bin=${3:-$B/hibana} f="$OUT/ncu_decode${4:+_$4}_$1"
  HIBANA_CUDA_PROFILE_REPLAY=3 timeout 400 ncu --profile-from-start off --graph-profiling node \
    --clock-control none --cache-control ${CACHE:-all} --metrics gpu__time_duration.sum --csv \
    --print-units base "$bin" bench decode --device cuda --load-format dummy \
    --config bench/configs/$1.json --dtype $2 --batch 1 --context 4096 --steps 4 \
    >"$f.csv" 2>"$f.err"
  python3 tools/gpu/ncu_step.py "$f.csv" >"$f.txt"
  [ -n "${4:-}" ] || head -40 "$f.txt"
}

# The per-kernel step profiles of the reference tree (.abref, built by stage ab) and this one,
# side by side per kernel group (tools/gpu/ncu_step.py BEFORE AFTER), for each CONFIGS shape
# (CACHE as in profile; warm caches by default here).
stage_profile_ab() {
  [ -x .abref/b/hibana ] || { echo "profile-ab: run stage ab first (it builds .abref)"; return 1; }
  configs | while read -r cfg dt; do
    CACHE=${CACHE:-none} profile_step "$cfg" "$dt" .abref/b/hibana ref
    CACHE=${CACHE:-none} profile_step "$cfg" "$dt" $B/hibana this
    python3 tools/gpu/ncu_step.py "$OUT/ncu_decode_ref_$cfg.csv" "$OUT/ncu_decode_this_$cfg.csv" |
      tee "$OUT/ncu_decode_ab_$cfg.txt" | head -30
  done
}

# One decode step as its kernels ran in the replayed graph, overlaps included (Nsight Systems,
# graph nodes traced; tools/gpu/nsys_step.py): PROFILE="CONFIG DTYPE", BATCH (1). The GPU
# machine has only the nsys inside Nsight Compute; its report importer needs libdw1 and libelf1,
# added to .devdeps by hand (`cd .devdeps && apt-get download libdw1 libelf1`: pack-debs would
# bring their compression libraries too, ahead of the machine's own). Under nsys the step runs
# ~10% slower than in bench decode.
# TIMELINE_BIN: another build's hibana (this tree's by default), TIMELINE_TAG its files' suffix.
stage_timeline() {
  set -- ${PROFILE:-qwen3-next-80b-a3b fp8}
  local nsys f="$OUT/timeline_$1_b${BATCH:-1}${TIMELINE_TAG:-}"
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys \
    /opt/nvidia/nsight-compute/*/host/*/nsys 2>/dev/null | head -1)
  [ -n "$nsys" ] || { echo "timeline: no nsys on this machine"; return 1; }
  timeout 200 "$nsys" profile --cuda-graph-trace=node --trace=cuda -o "$f" --force-overwrite true \
    ${TIMELINE_BIN:-$B/hibana} bench decode --device cuda --load-format dummy \
    --config bench/configs/$1.json --dtype $2 --batch ${BATCH:-1} --context 4096 --steps 8 \
    >"$f.log" 2>&1
  grep -E -A1 "tokens/s" "$f.log" | tail -2
  if [ ! -f "$f.nsys-rep" ] && [ -f "$f.qdstrm" ]; then  # nsys without its importer beside it
    local imp
    imp=$(ls /opt/nvidia/nsight-compute/*/host/*/QdstrmImporter 2>/dev/null | head -1)
    [ -n "$imp" ] && timeout 200 "$imp" -i "$f.qdstrm" >"$f.import.log" 2>&1
  fi
  if [ ! -f "$f.nsys-rep" ]; then
    echo "timeline: no report; $(tail -1 "$f.import.log" 2>/dev/null) (the importer needs libdw1" \
      "and libelf1 in .devdeps)"
    return 1
  fi
  timeout 200 "$nsys" stats --force-overwrite true --report cuda_gpu_trace --format csv --output "$f" \
    "$f.nsys-rep" \
    >"$f.stats.log" 2>&1
  python3 tools/gpu/nsys_step.py "${f}_cuda_gpu_trace.csv" >"$f.txt" 2>&1
  head -${LINES_SHOWN:-60} "$f.txt"
  rm -f "$f.nsys-rep" "$f.sqlite" "$f.qdstrm"
}

# The timeline of the reference build (.abref, built by `ab`: run `ab` first on the same
# machine) and of this tree's, then each kernel group's critical time in both (nsys_step.py
# --against): where the two builds' steps differ.
stage_timeline_ab() {
  [ -x .abref/b/hibana ] && [ -x $B/hibana ] || { echo "timeline-ab: run ab first"; return 1; }
  set -- ${PROFILE:-qwen3-next-80b-a3b fp8}
  local f="$OUT/timeline_$1_b${BATCH:-1}"
  TIMELINE_BIN=.abref/b/hibana TIMELINE_TAG=_ref LINES_SHOWN=0 stage_timeline || return 1
  LINES_SHOWN=0 stage_timeline || return 1
  echo "== base: ref $(cut -c1-10 .abref/REF); this: $(git rev-parse --short HEAD 2>/dev/null)"
  python3 tools/gpu/nsys_step.py "${f}_cuda_gpu_trace.csv" --against "${f}_ref_cuda_gpu_trace.csv" |
    tee "$f.ab.txt" | head -${LINES_SHOWN:-30}
}

# PROFILE=none skips the step; DTYPE picks the matmuls' weights (bf16).
stage_profile() {
  set -- ${PROFILE:-qwen3-8b bf16}
  [ "$1" = none ] || profile_step "$@"
  [ "${SHAPES:-}" = none ] && return
  for shape in $(echo "${SHAPES:-24576x4096,4096x4096}" | tr , " "); do
    timeout 200 ncu --clock-control none --cache-control none -k regex:"gemv_kernel|mma_kernel" \
      --launch-skip 6 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
      --section InstructionStats --section ComputeWorkloadAnalysis $B/hibana bench matmul \
      --device cuda --dtype ${DTYPE:-bf16} --shapes $shape --batch 1 --reps 3 \
      >"$OUT/ncu_matmul_$shape.txt" 2>&1
    grep -E "Throughput|Duration|Warp Cycles|Occupancy|Registers|Grid Size|Shared Memory|Waves|Eligible|Issued Ipc|Executed Inst" \
      "$OUT/ncu_matmul_$shape.txt" | head -40
  done
}

# The floor under a decode kernel: graphs of empty kernels and of bare reads, PDL on and off.
stage_floor() {
  nvcc -O3 -std=c++17 -arch=sm_90 -o $B/launch_floor tools/gpu/launch_floor.cu &&
    timeout 120 $B/launch_floor 2>&1 | tee "$OUT/launch_floor.log"
}

# The prefill products by cuBLASLt (tools/gpu/cublas_gemm.cu) beside hibana's tiled kernel at
# the same shapes and PREFILL_M rows (8192): the 8B's in bf16, the 80B's DeltaNet projections
# in fp8 (hibana's with 128-block scales, cuBLASLt's per tensor).
stage_cublas() {
  local m=${PREFILL_M:-8192}
  mkdir -p $B && nvcc -O3 -std=c++17 -arch=sm_90 -o $B/cublas_gemm tools/gpu/cublas_gemm.cu \
    -lcublasLt || return 1
  timeout 120 $B/cublas_gemm $m 2>&1 | tee "$OUT/cublas_gemm.log"
  timeout 200 $B/hibana bench matmul --device cuda --dtype bf16 --batch $m --reps 5 \
    --shapes 6144x4096,4096x4096,24576x4096,4096x12288 2>&1 | tee "$OUT/tiled_bf16.log"
  timeout 100 $B/hibana bench matmul --device cuda --dtype fp8 --batch $m --reps 5 \
    --shapes 12352x2048,2048x4096 2>&1 | tee "$OUT/tiled_fp8.log"
}

# The prefix cache's tiers on the GPU (issue #5's benchmark): a returning 32k-token
# conversation's time to first token from each tier, and the agent replay's hit rate, both on
# the embedded model served from CUDA.
stage_tiers() {
  timeout 200 python3 tools/load/returning_conversation.py --bin $B/hibana --tokens 32768 2>&1 |
    tail -6 | tee "$OUT/tiers_returning.txt"
  timeout 200 python3 tools/load/agent_replay.py --bin $B/hibana 2>&1 | tail -8 |
    tee "$OUT/tiers_replay.txt"
}

# The decode matmul's weight stream without its arithmetic, row-major against tile-contiguous
# (tools/gpu/weight_stream.cu).
stage_stream() {
  nvcc -O3 -std=c++17 -arch=sm_90 -o $B/weight_stream tools/gpu/weight_stream.cu &&
    timeout 120 $B/weight_stream 2>&1 | tee "$OUT/weight_stream.log"
}

# Whether a persistent decode kernel would pay (tools/gpu/op_chain.cu): a chain of 36 80B-layer
# products as one graph of kernels against one cooperative kernel walking them, products only
# and with one-CTA ops between them.
stage_chain() {
  mkdir -p $B && nvcc -O3 -std=c++17 -arch=sm_90 -o $B/op_chain tools/gpu/op_chain.cu || return 1
  # The L2-prefetch ways are ruled out (sixteenth slice): NO_L2=0 runs them again.
  export NO_L2=${NO_L2:-1}
  { timeout 120 $B/op_chain && SMALL=1 timeout 120 $B/op_chain; } 2>&1 | tee "$OUT/op_chain.log"
}

# Is a chain's cost per op the queue its own weight stream builds? The ring with RING_TILES of
# 32 KiB per SM (in flight: one fewer), then the graph and persistent ways with their CTAs per SM
# capped (CTAS_PER_SM), products only and with one-CTA ops (SMALL=1).
stage_chain_sweep() {
  mkdir -p $B
  export NO_L2=1
  for t in ${TILES:-2 3 4 6}; do
    nvcc -O3 -std=c++17 -arch=sm_90 -DRING_TILES=$t -o $B/op_chain_$t tools/gpu/op_chain.cu &
  done
  wait
  for small in 0 1; do
    for t in ${TILES:-2 3 4 6}; do
      echo "== ring tiles $t, SMALL=$small"
      SMALL=$small timeout 60 $B/op_chain_$t 2>&1 | grep -E '^(bare|ring)|DIFFER|NaN'
    done
    for c in ${CAPS:-1 2 3}; do
      echo "== CTAS_PER_SM=$c, SMALL=$small"
      SMALL=$small CTAS_PER_SM=$c timeout 60 $B/op_chain_6 2>&1 |
        grep -E '^(graph|persistent)|CTAs per SM|DIFFER|NaN'
    done
  done 2>&1 | tee "$OUT/op_chain_sweep.log"
}

# The decode matmul alone beside the bare weight stream, over edited copies of the kernel
# (tools/gpu/gemv_variants.sh; VARIANTS picks them).
stage_alone() {
  tools/gpu/gemv_variants.sh ${VARIANTS:-base bare stripped} 2>&1 | tee "$OUT/gemv_alone.log"
}

# Nsight Compute's full sections for one kernel of a decode step at batch 1, 4k context:
# KERNEL (a regex; attention_split_kernel unless set) of the 8B (PROFILE="CONFIG DTYPE" for
# another), the SKIP-th launch on (past the first, unrecorded step), caches kept; the report,
# its details and its per-instruction source page (stall samples) under $OUT.
stage_kernel() {
  set -- ${PROFILE:-qwen3-8b bf16}
  timeout 300 ncu --clock-control none --cache-control none -k regex:"${KERNEL:-attention_split_kernel}" \
    --launch-skip ${SKIP:-40} --launch-count 1 --set full -o "$OUT/kernel" $B/hibana bench decode \
    --device cuda --load-format dummy --config bench/configs/$1.json --dtype $2 --batch 1 \
    --context 4096 --steps 4 >"$OUT/kernel.log" 2>&1
  ncu --import "$OUT/kernel.ncu-rep" --page details >"$OUT/kernel_details.txt" 2>&1
  ncu --import "$OUT/kernel.ncu-rep" --page source --print-source sass --csv \
    >"$OUT/kernel_source.csv" 2>&1
  grep -E "Duration|DRAM Throughput|L2 Hit|Warp Cycles|Occupancy|Registers|Eligible|Bank|Block Limit" \
    "$OUT/kernel_details.txt" | head -40
}

# Where the decode matmul's time goes on SHAPES (default the 80B's DeltaNet input and mixer
# output, DTYPE fp8, BATCH 1): Nsight Compute's full sections on `bench matmul`, then
# tools/gpu/ncu_source.py on the SASS (instructions per warp by opcode, stall reasons, the
# kernel's regions: set-up, copies, the activations' split, loop, end).
stage_source() {
  for shape in $(echo "${SHAPES:-12352x2048,2048x4096}" | tr , " "); do
    local f="$OUT/source_${shape}_${DTYPE:-fp8}_b${BATCH:-1}"
    timeout 200 ncu --clock-control none --cache-control none -k regex:"gemv_kernel|mma_kernel" \
      --launch-skip 6 --launch-count 1 --set full -o "$f" $B/hibana bench matmul --device cuda \
      --dtype ${DTYPE:-fp8} --shapes $shape --batch ${BATCH:-1} --reps 3 >"$f.log" 2>&1
    ncu --import "$f.ncu-rep" --page details >"$f.details.txt" 2>&1
    ncu --import "$f.ncu-rep" --page source --print-source sass --csv >"$f.csv" 2>&1
    echo "== $shape ${DTYPE:-fp8} batch ${BATCH:-1}"
    grep -E "^ +(Duration|DRAM Throughput|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Achieved Active Warps Per SM) " \
      "$f.details.txt"
    python3 tools/gpu/ncu_source.py "$f.csv" --top ${TOP:-12} >"$f.txt"
    sed -n '/^samples/p;/^stall/p;/^regions/,/^top/p' "$f.txt"
  done
}

# Decode lines of one variant, tagged for tools/gpu/ab_table.py and appended to $OUT/ab.txt
# (each run's whole output to $OUT/ab_runs.log):
# bench_tagged LABEL BINARY CONFIG DTYPE [NAME=VALUE ...] (the environment of that run).
bench_tagged() {
  local label=${1// /,} bin=$2 cfg=$3 dt=$4  # (one word: the table splits on spaces)
  shift 4
  ( [ $# -eq 0 ] || export "$@"; decode_run "$bin" "$cfg" "$dt" 400 "${BATCHES:-1,8}" ) |
    tee -a "$OUT/ab_runs.log" | grep -E "^ +[0-9]+ +[0-9]+ +[0-9.]+ " | sed "s|^|$label $cfg |" | tee -a "$OUT/ab.txt"
  local rc=${PIPESTATUS[0]}
  # (a run that failed leaves its batches out of the table: say so beside it)
  [ "$rc" -eq 0 ] || echo "$label $cfg: the run failed (exit $rc; its output is in ab_runs.log)" >>"$OUT/ab_failed.txt"
}

# The table of ratios of $OUT/ab.txt, then the runs that failed.
ab_summary() {
  python3 tools/gpu/ab_table.py "$OUT/ab.txt"
  [ ! -s "$OUT/ab_failed.txt" ] || cat "$OUT/ab_failed.txt"
}

# CONFIGS: the decode shapes, CONFIG:DTYPE each (both by default), one line per shape.
configs() { echo "${CONFIGS:-qwen3-8b:bf16 qwen3-next-80b-a3b:fp8}" | tr ' ' '\n' | tr ':' ' '; }

# A benchmark knob swept on the decode shapes: KNOB=NAME VALUES="v1 v2 ..." (the first is the
# reference), ROUNDS rounds (2) with the values alternating, then the table of ratios. Or
# VARIANTS: environments separated by ';', `base` for none (the first is the reference), e.g.
# VARIANTS="base;HIBANA_CUDA_FUSED_SWIGLU=0;HIBANA_CUDA_FUSED_SWIGLU=0 HIBANA_CUDA_GROUPED_PREFETCH=0".
stage_sweep() {
  local variants
  if [ -n "${VARIANTS:-}" ]; then
    variants=$VARIANTS
  else
    : "${KNOB:?KNOB=NAME VALUES=\"...\" (or VARIANTS=\"...;...\") tools/gpu/check.sh sweep}"
    variants=$(for v in ${VALUES:?}; do printf '%s=%s;' "$KNOB" "$v"; done)
  fi
  rm -f "$OUT/ab.txt" "$OUT/ab_failed.txt"
  configs | while read -r cfg dt; do
    for _ in $(seq 1 ${ROUNDS:-2}); do
      echo "$variants" | tr ';' '\n' | while read -r env; do
        [ -n "$env" ] || continue
        if [ "$env" = base ]; then
          bench_tagged base $B/hibana "$cfg" "$dt" >/dev/null
        else
          # shellcheck disable=SC2086  # (one NAME=VALUE word per variable)
          bench_tagged "$env" $B/hibana "$cfg" "$dt" $env >/dev/null
        fi
      done
    done
  done
  ab_summary
}

# Edited builds of one source file, benchmarked alternately (for constants a knob would
# multiply instantiations of): EDITS, one "LABEL SED" a line (SED a sed -E script applied to
# FILE, the decode matmul's kernel gemv_kernel.cuh by default; LABEL orig alone: the source
# as it is; the first is the reference), ROUNDS alternating runs on the CONFIGS. Each is its
# own build, the first built last: with orig first, $B/hibana is the source's build again
# after.
stage_edit_sweep() {
  local f=${FILE:-src/backend/cuda/gemv_kernel.cuh} label expr labels=""
  : "${EDITS:?EDITS=\"LABEL SED\" lines}"
  cp $f $B/edit_sweep.orig
  while read -r label expr; do
    [ -n "$label" ] || continue
    labels="$label $labels"
    cp $B/edit_sweep.orig $f  # (a new mtime: every variant rebuilds)
    [ -z "$expr" ] || sed -i -E "$expr" $f
    if cmp -s $f $B/edit_sweep.orig && [ -n "$expr" ]; then
      echo "$label: the edit changed nothing"; cp $B/edit_sweep.orig $f; return 1
    fi
    cmake --build $B -j16 --target hibana >"$OUT/edit_build_$label.log" 2>&1 ||
      { grep -E "error" -A3 "$OUT/edit_build_$label.log" | head -20; cp $B/edit_sweep.orig $f; return 1; }
    cp $B/hibana $B/hibana_$label
  done <<<"$(echo "$EDITS" | tac)"
  cp $B/edit_sweep.orig $f
  BINS=$(for label in $labels; do printf '%s=%s ' "$label" "$B/hibana_$label"; done) stage_bins
}

# Binaries benchmarked alternately — edit-sweep's builds, or ones built elsewhere
# (tools/gpu/prebuild.sh on a machine without a GPU: no build time here): BINS="LABEL=PATH ..."
# (the first is the reference), ROUNDS rounds on the CONFIGS. Fails at once, saying why, where
# one of them does not start here.
stage_bins() {
  local b
  : "${BINS:?BINS=\"LABEL=PATH ...\"}"
  for b in $BINS; do
    "${b#*=}" --version >/dev/null 2>&1 && continue
    echo "${b#*=} does not run here:"
    "${b#*=}" --version 2>&1 | head -3
    return 1
  done
  rm -f "$OUT/ab.txt" "$OUT/ab_failed.txt"
  configs | while read -r cfg dt; do
    for _ in $(seq 1 ${ROUNDS:-2}); do
      for b in $BINS; do bench_tagged "${b%%=*}" "${b#*=}" "$cfg" "$dt" >/dev/null; done
    done
  done
  ab_summary
}

# The fp8 decode matmul's weight ring per warp (RINGS, KiB: 4 and 5 take 1 KiB stages, 6 and up
# 2 KiB ones, 3 stages at least; `orig`: the source's). docs/benchmarks.md, eighteenth slice:
# 6 KiB beat 12 and 16 on the 80B.
stage_ring_sweep() {
  local r
  EDITS=$(for r in ${RINGS:-orig 4 5}; do
    if [ $r = orig ]; then echo orig; else
      echo "ring$r /RingPerWarp = /s/(Elt::fp8 \\? )[0-9]+ << 10/\\1$r << 10/"
    fi
  done) stage_edit_sweep
}

# This tree against a reference, both built here, benchmarked alternately in the same session
# (a figure from another session, or another machine, is no baseline: the H200's speed moves a
# few percent between loans). The reference is the tree tools/gpu/ab_ref.sh REF put in
# .abref.tar.gz (carry it; an .abref directory is taken as it is): built there while this tree
# builds. Without .abref, the reference is this build
# without AB_ENV. AB_ENV="NAME=VALUE ..." applies to this tree's runs only (a knob's A/B), and
# to AB_MORE's: more trees (`tools/gpu/ab_ref.sh REV .abref-NAME`: carry .abref-NAME.tar.gz),
# each built and run in every round after the reference (a bisection in one call).
# DIR from DIR.tar.gz (tools/gpu/ab_ref.sh) where there is one, unless DIR already holds that
# revision (a warm machine keeps an unpacked tree and its build between calls; another
# revision's is replaced, build and all).
ab_unpack() {
  [ -f $1.tar.gz ] || return 0
  [ "$(tar -xzOf $1.tar.gz ./REF)" = "$(cat $1/REF 2>/dev/null)" ] && return 0
  rm -rf $1 && mkdir $1 && tar -xzf $1.tar.gz -C $1
}
ab_build_tree() {  # DIR: its hibana, logs ab_configure_DIR.log and ab_build_DIR.log
  local d=$1 n=${1#.}
  ab_unpack $d
  cmake -S $d -B $d/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DHIBANA_BENCH=OFF \
    -DHIBANA_TESTS=OFF -DHIBANA_CUDA_ARCHS=90 >"$OUT/ab_configure_$n.log" 2>&1 &&
    cmake --build $d/b -j8 --target hibana >"$OUT/ab_build_$n.log" 2>&1
}
stage_ab() {
  local ref=$B/hibana ref_label="without:${AB_ENV:-}" d
  ab_unpack .abref
  if [ -d .abref ]; then
    ref=.abref/b/hibana
    ref_label="ref:$(cat .abref/REF 2>/dev/null | cut -c1-10)"
    ab_build_tree .abref &
  else
    : "${AB_ENV:?without .abref, AB_ENV says what to compare}"
  fi
  for d in ${AB_MORE:-}; do ab_build_tree $d & done
  stage_build || return 1  # (incremental: this tree as it is now)
  wait
  [ -x "$ref" ] || { echo "reference build failed"; tail -20 "$OUT/ab_build_abref.log"; return 1; }
  for d in ${AB_MORE:-}; do
    [ -x "$d/b/hibana" ] || { echo "build of $d failed"; tail -20 "$OUT/ab_build_${d#.}.log"; return 1; }
  done
  rm -f "$OUT/ab.txt" "$OUT/ab_failed.txt"
  # Each round runs the trees in turn, the even rounds in reverse order (a machine that runs
  # its second run of a pair faster or slower biases no tree).
  configs | while read -r cfg dt; do
    for r in $(seq 1 ${ROUNDS:-2}); do
      local order="ref ${AB_MORE:-} this"
      [ $((r % 2)) -eq 0 ] && order=$(echo $order | tr ' ' '\n' | tac | tr '\n' ' ')
      for v in $order; do
        # shellcheck disable=SC2086  # (one NAME=VALUE word per variable)
        case $v in
          ref) bench_tagged "$ref_label" "$ref" "$cfg" "$dt" >/dev/null ;;
          this) bench_tagged "this${AB_ENV:+:$AB_ENV}" $B/hibana "$cfg" "$dt" \
                  ${AB_ENV:-} >/dev/null ;;
          *) bench_tagged "$(cut -c1-10 $v/REF)${AB_ENV:+:$AB_ENV}" $v/b/hibana "$cfg" "$dt" \
               ${AB_ENV:-} >/dev/null ;;  # (an AB_MORE tree, unpacked and built above)
        esac
      done
    done
  done
  ab_summary
}

# Decode through the HTTP API (tools/load/serve_decode.py) on the decode shapes with dummy
# weights, CLIENTS streams of ~4000-token prompts at once, beside `bench decode` at the same
# batch sizes in the same session: the steady per-stream rate against the bench's tok/s / N is
# what the server's own work (HTTP, scheduling, sampling, detokenising) costs a step.
stage_serve_decode() {
  local clients=${CLIENTS:-1,8}
  # (tools/gpu/pending.sh says how .devdeps/qwen3-coder is made; its tokenizer travels gzipped.)
  [ -n "${TOKENIZER:-}" ] || [ -f .devdeps/qwen3-coder/tokenizer.json ] ||
    gunzip -k .devdeps/qwen3-coder/tokenizer.json.gz
  configs | while read -r cfg dt; do
    echo "== $cfg $dt"
    timeout 500 python3 tools/load/serve_decode.py --bin $B/hibana --clients "$clients" \
      --prompt-tokens 4000 --max-tokens 256 --log "$OUT/serve_decode_$cfg.log" -- --device cuda \
      --load-format dummy --config bench/configs/$cfg.json --dtype "$dt" --kv-cache-size 16GiB \
      --tokenizer "${TOKENIZER:-.devdeps/qwen3-coder}" \
      2>&1 | tee "$OUT/serve_decode_$cfg.txt"
    BATCHES=$clients bench_tagged bench $B/hibana "$cfg" "$dt"
  done
}

# The embedded model served from the GPU, asked one chat question through the OpenAI API.
stage_serve() {
  $B/hibana serve --device cuda --port 30555 >"$OUT/serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do
    curl -sf localhost:30555/health >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -s localhost:30555/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Write a haiku about sparks."}],"max_tokens":48}' |
    tee "$OUT/serve_reply.json"
  echo
  curl -s localhost:30555/metrics | grep -E "^hibana_(memory_bytes|requests_finished|generation_tokens)" | head
  kill $pid
  wait $pid 2>/dev/null
  grep -E "error|warn" "$OUT/serve.log" | head -5
}

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for s in "$@"; do
  case $s in
    build) stage_build || exit 1 ;;
    tests) stage_tests ;;
    tests-knobs) stage_tests_knobs ;;
    sanitize) stage_sanitize ;;
    bench-8b) bench_decode qwen3-8b bf16 240 ;;
    bench-80b) bench_decode qwen3-next-80b-a3b fp8 400 ;;
    prefill) stage_prefill ;;
    serve) stage_serve ;;
    tiers) stage_tiers ;;
    profile) stage_profile ;;
    timeline) stage_timeline ;;
    timeline-ab) stage_timeline_ab ;;
    matmul) stage_matmul ;;
    floor) stage_floor ;;
    cublas) stage_cublas ;;
    stream) stage_stream ;;
    alone) stage_alone ;;
    chain) stage_chain ;;
    chain-sweep) stage_chain_sweep ;;
    ring-sweep) stage_ring_sweep ;;
    edit-sweep) stage_edit_sweep ;;
    bins) stage_bins || status=1 ;;
    kernel) stage_kernel ;;
    source) stage_source ;;
    sweep) stage_sweep ;;
    ab) stage_ab ;;
    profile-ab) stage_profile_ab ;;
    serve-decode) stage_serve_decode ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
exit $status
