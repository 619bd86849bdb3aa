#!/usr/bin/env bash
# Runs on the GPU machine: builds tools/gpu/gemv_alone.cu over edited copies of the decode
# matmul (matmul_gemv.cu and its kernel gemv_kernel.cuh, common.cuh, mma_common.cuh) and runs
# each, to find which part of the kernel holds it below the bare weight stream printed beside
# it. The edits break its results (timing only). DTYPE=fp8 times the fp8 kernel on the 80B's shapes.
# Usage: tools/gpu/gemv_variants.sh base bare nofill ...   (variants below; builds in parallel)
set -uo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
W=${WORK:-/tmp/gemv_variants}
MMA='s/mma\(ch, a\[0\], a\[1\], a\[2\], a\[3\], bx\[0\]\[2 \* j\], bx\[0\]\[2 \* j \+ 1\]\);/ch[0] += __uint_as_float((a[0] ^ a[1] ^ a[2] ^ a[3]) & 0x3f800000u);/;'
NOX='s/const bool has_x = column_used && x_tok < x_rows;/const bool has_x = false;/;'
NOFILL='s/const bool x_fits = /const bool x_fits = false \&\& /; s/const int64_t xrow = kXShared \|\| !column_used \? -1 : x_row_of\(x_tok\);/const int64_t xrow = -1;/;'
NOSCALE='s/if \(scaled && \(cend == block_end \|\| cend >= span\)\)/if (false)/;'
NOBREAK='s/if \(ck >= span\) break;//;'
SIMPLE='s/\(in \? k_issue \+ u \* KC : 0\)/(k_issue + u * KC)/; s/in && okA\)/true)/; s/in && okB\)/true)/;'
NOZFILL='s/"cp.async.cg.shared.global.L2::256B \[%0\], \[%1\], 16, %2;\\n" ::"r"\(smem\), "l"\(gmem\),\n\s*"r"\(valid \? 16 : 0\)\);/"cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\\n" ::"r"(smem), "l"(gmem));/;'
LB='s/__launch_bounds__\(cta_warps\(kCtaSplits\) \* 32, 4 \* kWarps \/ cta_warps\(kCtaSplits\)\)/__launch_bounds__(cta_warps(kCtaSplits) * 32)/;'
NOFINISH='s/  finish<([^>]*)>\(/  if (total[0] == 12345.0f) finish<$1>(/;'
# fp8 weights: the A fragment as f16 (one conversion per pair instead of four: e4m3 -> f16x2,
# not then -> f32 -> bf16) into an f16 mma — what an f16 activation split would cost; or no
# conversion at all (the raw bytes into the mma), the conversion's whole share.
F16A_MMA='s/\.f32\.bf16\.bf16\.f32/.f32.f16.f16.f32/;'
F16A_CVT='s/const float2 f = __half22float2\(__half2\(h\)\);\n\s*return pack_bf16\(f\.x, f\.y\);/return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);/;'
NOCONV='s/(fp8x2_to_bf16x2\(uint32_t two\) \{)/$1\n  return two;/;'
# Or the bytes placed into bf16 fields by bit operations (one byte permute, mask, shift, or:
# the value times 2^-120, which a real kernel would fold into the block scale).
BITS='s/(fp8x2_to_bf16x2\(uint32_t two\) \{)/$1\n  { const uint32_t q = __byte_perm(two, 0, 0x1404); return (q \& 0x80008000u) | ((q \& 0x7f007f00u) >> 4); }/;'
# Or fp8 tensor cores (mma m16n8k32 e4m3, sm_89+): the weight bytes as they are, half as many
# mma per chunk, the activations' words passed as if they were e4m3 terms — the speed a
# native-fp8 path (activation terms in e4m3) would reach, its numerics aside.
E4M3_MMA='s/m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32/m16n8k32.row.col.f32.e4m3.e4m3.f32/;'
E4M3_FRAG='s/a\[0\] = fp8x2_to_bf16x2\(wa\[j\] & 0xffffu\);\n\s*a\[1\] = fp8x2_to_bf16x2\(wb\[j\] & 0xffffu\);\n\s*a\[2\] = fp8x2_to_bf16x2\(wa\[j\] >> 16\);\n\s*a\[3\] = fp8x2_to_bf16x2\(wb\[j\] >> 16\);/a[0] = wa[2 * j]; a[1] = wb[2 * j]; a[2] = wa[2 * j + 1]; a[3] = wb[2 * j + 1];/;'
E4M3_LOOP='s/for \(int j = 0; j < MMAS; \+\+j\) \{\n(\s*)uint32_t a\[4\];/for (int j = 0; j < MMAS \/ 2; ++j) {\n$1uint32_t a[4];/;'
NOHINT='s/cp.async.cg.shared.global.L2::256B \[%0\], \[%1\], 16, %2;/cp.async.cg.shared.global [%0], [%1], 16, %2;/g;'

edits() {  # variant -> "kernel-edits@@common-edits@@mma-common-edits"
  case $1 in
    base) echo "@@@@" ;;
    bare) echo "$MMA $NOX@@@@" ;;          # no products, no activation loads
    nofill) echo "$MMA $NOFILL@@@@" ;;     # nor the activations' shared-memory fill
    noscale) echo "$NOSCALE@@@@" ;;        # no scale-block test per chunk
    nobreak) echo "$NOBREAK@@@@" ;;        # no end-of-split test per chunk
    simple) echo "$SIMPLE@@@@" ;;          # copies without bounds selects
    stripped) echo "$MMA $NOX $NOSCALE $NOBREAK $SIMPLE@@$NOZFILL@@" ;;
    stripnf) echo "$MMA $NOX $NOFILL $NOSCALE $NOBREAK $SIMPLE@@$NOZFILL@@" ;;  # nor the fill
    nozfill) echo "@@$NOZFILL@@" ;;        # cp.async without the zero-fill operand
    nohint) echo "@@$NOHINT@@" ;;          # without the L2 256-byte prefetch hint
    lb) echo "$LB@@@@" ;;                 # launch bounds without the 4-CTA minimum
    nofinish) echo "$NOFINISH@@@@" ;;     # no output stores (gemv_alone runs one split)
    f16a) echo "@@@@$F16A_MMA $F16A_CVT" ;;   # fp8: f16 A fragments (see above)
    noconv) echo "@@@@$NOCONV" ;;          # fp8: no conversion of the weights
    bits) echo "@@@@$BITS" ;;              # fp8: conversion by bit operations (see above)
    e4m3) echo "$E4M3_LOOP@@@@$E4M3_MMA $E4M3_FRAG" ;;  # fp8: fp8 tensor cores (see above)
    *) return 1 ;;
  esac
}

build() {
  local d=$W/$1 e
  e=$(edits "$1") || { echo "$1: unknown variant"; return 1; }
  mkdir -p "$d/src/backend/cuda"
  cp src/backend/cuda/matmul_gemv.cu src/backend/cuda/gemv_kernel.cuh src/backend/cuda/common.cuh \
    src/backend/cuda/mma_common.cuh "$d/src/backend/cuda/"
  local ek=${e%%@@*} rest=${e#*@@}
  local ec=${rest%%@@*} em=${rest#*@@}
  # (the kernel edits go to both files: the launch's and the kernel's code)
  [ -n "$ek" ] && perl -0pi -e "$ek" "$d/src/backend/cuda/matmul_gemv.cu" \
    "$d/src/backend/cuda/gemv_kernel.cuh"
  [ -n "$ec" ] && perl -0pi -e "$ec" "$d/src/backend/cuda/common.cuh"
  [ -n "$em" ] && perl -0pi -e "$em" "$d/src/backend/cuda/mma_common.cuh"
  $NVCC -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -I"$d/src" -Isrc -DNDEBUG \
    -o "$d/gemv_alone" tools/gpu/gemv_alone.cu >"$d/build.log" 2>&1 ||
    { echo "$1: build failed"; head "$d/build.log"; }
}

for v in "$@"; do build "$v" & done
wait
for v in "$@"; do
  [ -x "$W/$v/gemv_alone" ] || continue
  echo "== $v"
  "$W/$v/gemv_alone"
done
