#!/usr/bin/env bash
# The GPU work still owed (docs/benchmarks.md, "Not measured yet"), as device calls of under ten
# minutes each: `tools/gpu/pending.sh 1` (build, op_chain's ring ways, every CUDA test, the
# 80B's decode at batch 1 and 8), `2` (the 8192-token prefill of both shapes with the new
# defaults against the old, decode through the API with a repetition penalty, the 8B's decode at
# every batch), `3` (the tests with the remaining switches on, the 80B at batch 32 and 64, the
# attention split sweep), `4` (racecheck, Nsight Compute of the tiled matmul both ways), `6` (the
# 6 KiB fp8 ring on the H200 against a3628f5, the tests), `7` (smaller fp8 rings, launch bounds,
# split-K), `8` (the 80B step's timeline and profile, op_chain's release points), `9` (the
# experts' gate/up under Nsight Compute, the combine's split form tested and timed), `10` (the
# decode fusions that lost, again), `12` (the experts' footprint), `13` (the experts' early
# split tested and timed, the experts' gate/up alone: twentieth slice), `14` (the twentieth
# slice's compiled-only changes tested and timed).
# Logs under $OUT. The 80B fp8 shape needs an H200 for batch 32 and 64 (its weights fill an 80
# GB H100 to 172 MiB).
# Usage on the device: source .devdeps/activate.sh && tools/gpu/pending.sh 1
set -u
B=build-gpu
: "${OUT:?OUT must name a folder}"

# pf CONFIG DTYPE VARIANT...: an 8192-token prefill per variant (environment settings), timed.
pf() {
  local cfg=$1 dt=$2
  shift 2
  for v in "$@"; do
    echo "== prefill $cfg ${v:-base}"
    env $v HIBANA_CUDA_TIMING=1 timeout 50 $B/hibana bench prefill --device cuda \
      --load-format dummy --config bench/configs/$cfg.json --dtype $dt --prompt-tokens 8192 2>&1 |
      tee "$OUT/prefill_${cfg}_$(echo "${v:-base}" | tr -c a-zA-Z0-9 _).log" |
      grep -E 'tokens/s|gdn|conv|moe|attention|matmul|tiled|presplit' | head -10
  done
}

# The defaults before the sixteenth slice, for the A/B of the new ones.
OLD="HIBANA_CUDA_GDN_CHUNKED=0 HIBANA_CUDA_CONV_TOKENS=0 HIBANA_CUDA_POOLED_SCRATCH=0 HIBANA_CUDA_TILED_PRESPLIT=0"

# Each call builds first: a machine that went back between calls keeps no build. The first
# call answers the 80B's question (op_chain's ring ways) and checks the tests; the second
# measures; the third profiles.
call1() {
  timeout 240 tools/gpu/check.sh build 2>&1 | tail -3
  timeout 100 tools/gpu/check.sh chain 2>&1 | grep -E 'bare|graph-early |persistent|ring|DIFFER|NaN' | head -16
  timeout 200 tools/gpu/check.sh tests 2>&1 | tail -25
  BATCHES=1,8 timeout 150 tools/gpu/check.sh bench-80b 2>&1 | tail -4
}

# Decode through the HTTP API on the 8B with Qwen3-Coder's sampling defaults, with and without
# its repetition penalty (penalised rows drawn from summaries since 3ae3d70), served with
# Qwen3-Coder's tokenizer, template and generation_config.json: .devdeps/qwen3-coder, made here by
#   mkdir -p .devdeps/qwen3-coder && cp ../shared/assets/qwen3-tokenizer/tokenizer.json \
#     ../shared/assets/models/Qwen3-Coder-30B-A3B-Instruct/{tokenizer,generation}_config.json \
#     .devdeps/qwen3-coder/ && gzip -9 .devdeps/qwen3-coder/tokenizer.json
# (gzipped: the tree sent to the device must stay under 64 MiB).
serve_penalised() {
  [ -f .devdeps/qwen3-coder/tokenizer.json ] || gunzip -k .devdeps/qwen3-coder/tokenizer.json.gz
  for rp in 1.0 1.05; do
    timeout 150 python3 tools/load/serve_decode.py --bin $B/hibana --clients 1,8 \
      --prompt-tokens 2000 --max-tokens 128 --log "$OUT/serve_penalised_$rp.log" \
      --sampling "{\"temperature\": 0.7, \"top_p\": 0.8, \"top_k\": 20, \"repetition_penalty\": $rp}" \
      -- --device cuda --load-format dummy --config bench/configs/qwen3-8b.json --dtype bf16 \
      --kv-cache-size 16GiB --tokenizer .devdeps/qwen3-coder 2>&1 | tail -7
  done
}

call2() {
  timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  pf qwen3-next-80b-a3b fp8 "" "$OLD"
  pf qwen3-8b bf16 "" "$OLD"
  serve_penalised
  BATCHES=1,8,32,64 timeout 150 tools/gpu/check.sh bench-8b 2>&1 | tail -6
}

call3() {
  timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  KNOBS="HIBANA_CUDA_FUSED_MATMUL_NORM=1 HIBANA_CUDA_FUSED_MATMUL_CONV=1 HIBANA_CUDA_FUSED_COMBINE_NORM=1 HIBANA_CUDA_TILED_PRESPLIT=1" \
    timeout 120 tools/gpu/check.sh tests-knobs 2>&1 | tail -10
  BATCHES=32,64 timeout 150 tools/gpu/check.sh bench-80b 2>&1 | tail -4
  CONFIGS=qwen3-next-80b-a3b:fp8 KNOB=HIBANA_CUDA_ATTENTION_SPLIT VALUES="128 64 32" ROUNDS=2 \
    timeout 120 tools/gpu/check.sh sweep 2>&1 | tail -6
}

# The ring way again (its input and count once per op), the API with a repetition penalty, and
# the cost of moving whole logits rows for comparison.
call5() {
  timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  timeout 100 tools/gpu/check.sh chain 2>&1 | grep -E 'bare|graph-early |persistent |ring|DIFFER|NaN' | head -12
  timeout 200 tools/gpu/check.sh tests 2>&1 | tail -12
  serve_penalised
  BATCHES=1,8 timeout 100 tools/gpu/check.sh bench-8b 2>&1 | tail -4
  WHOLE=1 BATCHES=1,8 timeout 100 tools/gpu/check.sh bench-8b 2>&1 | tail -4
}

# The eighteenth and nineteenth slices (the 6 KiB fp8 ring, routing at batch 1 by one warp) on
# the H200 against the tree before both (here, first: tools/gpu/ab_ref.sh a3628f5, then carry
# .abref.tar.gz), every CUDA test; then (7) the smaller fp8 rings (4 and 5 KiB, 1 KiB stages).
call6() {
  ROUNDS=1 BATCHES=1,8,32,64 timeout 420 tools/gpu/check.sh ab 2>&1 | tail -18
  timeout 150 tools/gpu/check.sh tests 2>&1 | tail -4
}
# Right after 6 (the build is there): the smaller fp8 rings, more CTAs per SM by launch bounds
# (5 and 6 against 4: the 6 KiB ring's gain looks like residency; the batch-1 fp8 kernels use
# 79-128 registers), fewer split-K products. Then 8: the 80B step's profile.
call7() {
  [ -x build-gpu/hibana ] || timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  export CONFIGS=qwen3-next-80b-a3b:fp8 ROUNDS=2 BATCHES=1,8
  timeout 200 tools/gpu/check.sh ring-sweep 2>&1 | tail -6
  local lb='s/__launch_bounds__\(kWarps \* 32, 4\)/__launch_bounds__(kWarps * 32, '
  EDITS=$(printf 'orig\nlb5 %s5)/\nlb6 %s6)/' "$lb" "$lb") timeout 200 tools/gpu/check.sh edit-sweep \
    2>&1 | tail -6
  # (132: one split for K = 2048 at batch 1)
  KNOB=HIBANA_CUDA_SPLIT_TILES VALUES="264 132" timeout 90 tools/gpu/check.sh sweep 2>&1 | tail -6
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
  timeout 80 ncu --set full --kernel-name-base demangled -k "regex:$regex" --launch-skip ${SKIP:-20} \
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

# racecheck, one test group at a time (together they did not finish in 200 s); the matmul's
# tiled kernel both ways. (op_chain's ring: `pending.sh ring`, no longer asked: the ring loses
# to the graph however deep, docs/benchmarks.md, eighteenth slice.)
call4() {
  timeout 200 tools/gpu/check.sh build 2>&1 | tail -2
  for f in 'CudaGdn.Chunked*' 'CudaTiledMatmul.Presplit*'; do
    timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/backend_tests \
      --gtest_filter="$f" --gtest_brief=1 >"$OUT/racecheck.log" 2>&1
    echo "racecheck $f: rc=$? $(tail -1 "$OUT/racecheck.log")"
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

# Why the 80B's expert gate/up is slow (20.6% of the batch-1 step, nineteenth slice; more
# bytes in flight made it slower): Nsight Compute on it and on the expert down projection
# (demangled names: <Elt, grouped, shared x, packed, ring, paired>). Then the combine's split
# form with the norm by each token's last CTA (HIBANA_CUDA_COMBINE_NORM_SPLIT, compiled only in
# the nineteenth slice: its bit test, the model and engine tests with it on), timed beside the
# down projection without its prefetch (which streams beside the gate/up).
call9() {
  [ -x $B/hibana ] || timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  local run=($B/hibana bench decode --device cuda --load-format dummy --dtype fp8 --batch 1
    --config bench/configs/qwen3-next-80b-a3b.json --context 4096 --steps 4)
  # (template arguments as ncu prints them: 1, true or (bool)1)
  local on='[^,]*(1|true)' off='[^,>]*(0|false)'
  # (a seventh template argument, as the twentieth slice's kKPar had, would match too)
  ncu_stalls gate_up "gemv_kernel<[^,]*3, $on, $on, $on, [^,]*6144, $on[,>]" "${run[@]}"
  [ "${NCU_ONLY:-0}" = 2 ] && return
  ncu_stalls down "gemv_kernel<[^,]*3, $on, $on, $on, [^,]*6144, $off[,>]" "${run[@]}"
  [ "${NCU_ONLY:-0}" = 1 ] && return
  timeout 60 $B/tests/backend_tests --gtest_filter='CudaFusedOps.CombineAddAndNorm*' \
    --gtest_brief=1 2>&1 | tail -3
  KNOBS=HIBANA_CUDA_COMBINE_NORM_SPLIT=1 timeout 150 tools/gpu/check.sh tests-knobs 2>&1 | tail -3
  CONFIGS=qwen3-next-80b-a3b:fp8 ROUNDS=2 BATCHES=1,8 \
    VARIANTS="base;HIBANA_CUDA_COMBINE_NORM_SPLIT=1;HIBANA_CUDA_GROUPED_PREFETCH=0" \
    timeout 150 tools/gpu/check.sh sweep 2>&1 | tail -8
}

# The decode fusions that lost before the 6 KiB ring and the batch-1 routing (sixteenth slice:
# 0.991 and 0.993), again on the tree as it is, with the attention split of 64 (seventeenth:
# 1.008): each a knob, one build.
# Then the timeline of the batch-1 SwiGLU gate/up with a 12 KiB ring (5 stages in flight, not 2):
# alone it streams 22 MB in 16.3 us (ncu, H100), with ~21 KB in flight per SM against the input
# projection's ~47 KB, yet that ring made the step 2% slower (nineteenth slice). Its own
# critical time says whether the gate/up got faster and something else slower.
call10() {
  [ -x $B/hibana ] || timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  CONFIGS=qwen3-next-80b-a3b:fp8 ROUNDS=2 BATCHES=1,8 VARIANTS="base;HIBANA_CUDA_FUSED_MATMUL_NORM=1;\
HIBANA_CUDA_FUSED_MATMUL_CONV=1;HIBANA_CUDA_ATTENTION_SPLIT=64" \
    timeout 240 tools/gpu/check.sh sweep 2>&1 | tail -10
  local f=src/backend/cuda/matmul_gemv.cu
  cp $f $B/gemv.orig
  sed -i -E 's/constexpr int kBig = kRingPerWarp<E, kPacked>,/constexpr int kBig = kPaired \&\& kPacked \&\& E == Elt::fp8 ? 12 << 10 : kRingPerWarp<E, kPacked>,/' $f
  cmp -s $f $B/gemv.orig && echo "call10: the ring edit changed nothing"
  timeout 200 cmake --build $B -j16 --target hibana >"$OUT/p12_build.log" 2>&1 &&
    LINES_SHOWN=30 timeout 100 tools/gpu/check.sh timeline 2>&1 | tail -28
  cp $B/gemv.orig $f
}

# Whether the experts' footprint slows them (their TLB reach: 75 GB of experts at E = 512):
# the 80B's shape with 128 and 32 experts moves nearly the same bytes a step (10 routed + the
# shared expert a layer; the router's matrix shrinks by 1.5 / 1.9 MB a layer). Then the gate/up
# under Nsight Compute, by region.
call12() {
  [ -x $B/hibana ] || timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  for e in 512 128 32; do
    sed "s/\"num_experts\": 512/\"num_experts\": $e/" bench/configs/qwen3-next-80b-a3b.json \
      >bench/configs/q80-e$e.json
    echo "== experts $e"
    decode_run_80 q80-e$e | grep -E '^ +(1|8) '
    rm -f bench/configs/q80-e$e.json
  done
  REGIONS=1 NCU_ONLY=2 call9
}
decode_run_80() {
  timeout 120 $B/hibana bench decode --device cuda --load-format dummy \
    --config bench/configs/$1.json --dtype fp8 --batch 1,8 --context 4096 --steps 16 2>&1
}

# The twentieth slice's change (the experts' gate/up split the token's activations before their
# wait at batch 1, HIBANA_CUDA_EXPERTS_X_EARLY) tested and timed, with the decode fusions that
# lost before (call 10's), and the experts' footprint question answered alone (gemv_alone's
# EXPERTS mode, built here beforehand: nvcc ... -o .devdeps/bin/gemv_alone, see its header).
call13() {
  [ -x $B/hibana ] || timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  local f='CudaOps*:*cuda*:*Cuda*'
  for t in backend_tests model_tests; do
    timeout 120 $B/tests/$t --gtest_filter="$f" --gtest_brief=1 >"$OUT/$t.log" 2>&1
    echo "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.log" | tr '\n' ' ')"
    grep -E "Failure|FAILED|Expected|Which is|differ" "$OUT/$t.log" | head -20
  done
  [ -x .devdeps/bin/gemv_alone ] && EXPERTS=1 timeout 60 .devdeps/bin/gemv_alone 2>&1 | tail -6
  CONFIGS=qwen3-next-80b-a3b:fp8 ROUNDS=2 BATCHES=1 VARIANTS="base;HIBANA_CUDA_EXPERTS_X_EARLY=0;\
HIBANA_CUDA_FUSED_MATMUL_NORM=1;HIBANA_CUDA_FUSED_MATMUL_CONV=1" \
    timeout 200 tools/gpu/check.sh sweep 2>&1 | tail -6
}

# The regression of the twenty-first slice: main ran the 80B at 0.953-0.972 of fc9ae65's speed
# at batch 1 (0.965-0.972 at 8) though every switch turned on since measured a gain against
# itself off; with the three of 2db7300 off it ran 0.960 of itself, so with fc9ae65's defaults
# the code costs ~8% against fc9ae65's. In PTX, 2db7300 changed the plain decode kernels only
# by reading the activations from L2 (__ldcg) instead of through L1 (__ldg); the branch
# ldg-probe is main with __ldg again after the wait. Here first: tools/gpu/ab_ref.sh fc9ae65;
# tools/gpu/ab_ref.sh fc9ae65 .abref-fc9ae65 (the same tree again: the noise floor); tools/gpu/ab_ref.sh 2db7300 .abref-2db7300; tools/gpu/ab_ref.sh
# ldg-probe .abref-ldg. Carry .devdeps and the four .tar.gz (move .devdeps/bin out, and the
# nsys debs libdw1 and libelf1, if the tree is refused as too large). 14: every tree at its defaults; 15, right after on the warm machine
# (the builds are there): every tree but the reference with the switches since fc9ae65 off.
more14=".abref-fc9ae65 .abref-2db7300 .abref-ldg"
call14() {
  AB_MORE=$more14 CONFIGS=qwen3-next-80b-a3b:fp8 ROUNDS=2 BATCHES=1,8 timeout 540 \
    tools/gpu/check.sh ab 2>&1 | tail -12
}
call15() {
  AB_MORE=$more14 AB_ENV="HIBANA_CUDA_COMBINE_NORM_SPLIT=0 HIBANA_CUDA_FUSED_MATMUL_CONV=0 \
HIBANA_CUDA_EXPERTS_X_EARLY=0 HIBANA_CUDA_SHARED_EXPERT_EARLY=0" CONFIGS=qwen3-next-80b-a3b:fp8 \
    ROUNDS=2 BATCHES=1 timeout 300 tools/gpu/check.sh ab 2>&1 | tail -8
}

# The splits' sums through distributed shared memory (HIBANA_CUDA_CLUSTER_SPLITS=1, off,
# compiled only in the twenty-first slice): every CUDA test (three run it with the switch on),
# the model and engine tests with it on, then the switch on both decode shapes at batch 1 and 8.
call16() {
  timeout 170 tools/gpu/check.sh build tests 2>&1 | tail -5
  KNOBS="HIBANA_CUDA_CLUSTER_SPLITS=1" timeout 100 tools/gpu/check.sh tests-knobs 2>&1 | tail -3
  ROUNDS=2 BATCHES=1,8 VARIANTS="base;HIBANA_CUDA_CLUSTER_SPLITS=1" timeout 250 \
    tools/gpu/check.sh sweep 2>&1 | tail -10
}

# The code-size suspect of the regression (docs/benchmarks.md, Not measured yet): the grouped
# kernels' activations' split out of line (__noinline__: one copy instead of two inlined ones).
call18() {
  [ -x build-gpu/hibana ] || timeout 240 tools/gpu/check.sh build 2>&1 | tail -2
  CONFIGS=qwen3-next-80b-a3b:fp8 ROUNDS=2 BATCHES=1,8 FILE=src/backend/cuda/gemv_prologue.cuh \
    EDITS="orig
noinline s/^__device__ __forceinline__ void share_activations/__device__ __noinline__ void share_activations/" \
    timeout 300 tools/gpu/check.sh edit-sweep 2>&1 | tail -6
}

# op_chain's graph-ctr way (twenty-first slice, compiled only): the chain's kernels ordered by
# completion counters instead of griddepcontrol.wait, beside graph-early and the persistent
# ways, products only and with one-CTA ops. If it beats graph-after-wait (the engine's way) by
# more than noise, the engine's decode kernels could wait the same way.
call17() {
  timeout 260 tools/gpu/check.sh chain 2>&1 | grep -E '^(bare|graph|persistent|ring)|DIFFER|NaN|layers'
}

# op_chain's ring kernel under Nsight Compute (no engine build needed).
ring_profile() {
  mkdir -p $B && nvcc -O3 -std=c++17 -arch=sm_90 -lineinfo -o $B/op_chain tools/gpu/op_chain.cu &&
    (export NO_L2=1 SKIP=2; ncu_stalls ring 'ring_kernel<false>' $B/op_chain)
}

case "${1:-}" in
  1) call1 ;;
  2) call2 ;;
  3) call3 ;;
  4) call4 ;;
  5) call5 ;;
  6) call6 ;;
  7) call7 ;;
  8) call8 ;;
  9) call9 ;;
  10) call10 ;;
  12) call12 ;;
  13) call13 ;;
  14) call14 ;;
  15) call15 ;;
  16) call16 ;;
  17) call17 ;;
  18) call18 ;;
  ring) ring_profile ;;
  *) echo "usage: $0 1|2|3|4|5|6|7|8|9|10|12|13|14|15|16|17|18|ring" >&2; exit 2 ;;
esac
