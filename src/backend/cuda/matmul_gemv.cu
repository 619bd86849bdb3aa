// Decode matmul (up to 8 token rows per group): which gemv_kernel.cuh kernel a product takes —
// activations shared in the CTA or loaded per warp, the weight ring, a grouped launch's one
// split, the splits of one row in one CTA — and its launch. The kernel's design and what it
// was measured against are in gemv_kernel.cuh.
#include <algorithm>
#include <atomic>
#include <utility>

#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda::mm {

namespace {

// CTAs of `smem` bytes of shared memory that fit on one SM (at most 4: the launch bounds).
int ctas_per_sm(size_t smem) {
  static const std::pair<int, int> sm = [] {
    int dev = 0, total = 0, reserved = 0;
    HIBANA_CUDA(cudaGetDevice(&dev));
    HIBANA_CUDA(cudaDeviceGetAttribute(&total, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    HIBANA_CUDA(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    return std::make_pair(total, reserved);
  }();
  return std::min<int>(4, static_cast<int>(sm.first / (smem + sm.second)));
}

// Sets the dynamic shared memory limit of a kernel variant once.
template <Elt E, bool kGrouped, bool kXShared, int kRows, int kRing, Fused kFused,
          bool kOneSplit, bool kXEarly = false>
void configure() {
  static const bool done = [] {
    HIBANA_CUDA(cudaFuncSetAttribute(
        gemv_kernel<E, kGrouped, kXShared, kRows, kRing, kFused, kOneSplit, kXEarly>,
        cudaFuncAttributeMaxDynamicSharedMemorySize,
        kWarps * kRing + (kXShared ? kXSharedMax : 0)));
    return true;
  }();
  (void)done;
}

template <Elt E, bool kGrouped, int kRows, Fused kFused, bool kOneSplit>
void launch(const Params& p, int groups, int x_rows) {
  assert(!kOneSplit || p.splits == 1);
  constexpr bool kPacked = kRows <= 2;
  constexpr int kBig = kRingPerWarp<E, kPacked>, kSmall = kSmallRingPerWarp<E, kPacked>;
  using S = Gemv<E, kBig>;
  const size_t x_bytes = static_cast<size_t>(x_rows) * 3 * S::plane_pitch_bytes(p.split_len);
  // Shared activations where they fit, unless their shared memory would leave fewer CTAs per
  // SM than the grid needs to run in one wave while the per-warp kernel would not.
  const int64_t ctas = (p.N + kRowsPerCta - 1) / kRowsPerCta * p.splits * groups;
  const int64_t wave_shared = static_cast<int64_t>(ctas_per_sm(S::kSmem + x_bytes)) * num_sms();
  const int64_t wave_plain = static_cast<int64_t>(ctas_per_sm(S::kSmem)) * num_sms();
  const bool x_fits = x_bytes <= static_cast<size_t>(kXSharedMax);
  bool shared_x = x_fits && !(ctas > wave_shared && ctas <= wave_plain);
  // Where bf16's 12 KiB rings leave the shared activations a second wave, 10 KiB rings may not
  // (HIBANA_CUDA_GEMV_SMALL_RING: 1 there, the default; 2 wherever x is shared; 3, or any
  // other positive value, never; 0 reads as unset, as for every numeric knob).
  using Small = Gemv<E, kSmall, kWideStages<E, kSmall, true>>;
  static const int64_t small_mode = knob("HIBANA_CUDA_GEMV_SMALL_RING", 1);
  bool small = false;
  if (x_fits && !shared_x && (small_mode == 1 || small_mode == 2)) {
    small = ctas <= static_cast<int64_t>(ctas_per_sm(Small::kSmem + x_bytes)) * num_sms();
    shared_x = small;
  }
  if (shared_x && small_mode == 2) small = true;
  // The shared-x kernels, with (kXEarly) or without the split before the wait; x_early in
  // more splits than one, where the one-CTA kernel does not take them (a grouped product that
  // is not SwiGLU, or a SwiGLU not stacked), splits after it, the same bits.
  constexpr bool kCanEarly = kGrouped && kRows == 1 && kOneSplit;
  auto shared_kernel = [&](auto early) {
    constexpr bool kE = decltype(early)::value;
    configure<E, kGrouped, true, kRows, kBig, kFused, kOneSplit, kE>();
    configure<E, kGrouped, true, kRows, kSmall, kFused, kOneSplit, kE>();
    return small ? gemv_kernel<E, kGrouped, true, kRows, kSmall, kFused, kOneSplit, kE>
                 : gemv_kernel<E, kGrouped, true, kRows, kBig, kFused, kOneSplit, kE>;
  };
  configure<E, kGrouped, false, kRows, kBig, kFused, kOneSplit>();
  auto kernel = gemv_kernel<E, kGrouped, false, kRows, kBig, kFused, kOneSplit>;
  if (shared_x) {
    kernel = kCanEarly && p.x_early ? shared_kernel(std::bool_constant<kCanEarly>{})
                                    : shared_kernel(std::false_type{});
  }
  const size_t smem = (small ? Small::kSmem : S::kSmem) + (shared_x ? x_bytes : 0);
  const dim3 grid(static_cast<unsigned>((p.N + kRowsPerCta - 1) / kRowsPerCta),
                  static_cast<unsigned>(p.splits), static_cast<unsigned>(groups));
  launch_pdl(kernel, grid, dim3(kWarps * 32), smem, p, x_rows);
  launched("gemv_kernel");
}

std::atomic<int64_t> g_one_cta_products{0};  // cuda_one_cta_split_products()

// A one-CTA kernel (kCtaSplits, gemv_kernel.cuh) and what its launches ask of the GPU, each
// found once.
// Grouped (an MoE launch's experts): a CTA per 16 or 32 rows of each slice, in as many waves as
// it takes (the CTAs of slices past the active ones leave at once); kXEarly, x_early's split
// before the wait.
template <Elt E, bool kXShared, int kRows, int kRing, Fused kFused, int kSplits,
          bool kGrouped = false, bool kXEarly = false>
struct CtaKernel {
  static constexpr int kCtaWarps = cta_warps(kSplits), kCtaRows = 16 * (kCtaWarps / kSplits);
  static auto kernel() {
    return gemv_kernel<E, kGrouped, kXShared, kRows, kRing, kFused, false, kXEarly, kSplits>;
  }
  // The dynamic shared memory it may take, set once: what its rings and the most shared
  // activations need, or the GPU's limit where that is less (8 warps of 10 KiB bf16 rings and
  // 26 KiB of activations are more than GB10's 99 KiB: its launches that do not fit take the
  // split-parallel kernel instead of failing to set the attribute).
  static int smem_limit() {
    static const int limit = [] {
      const int want = std::min(kCtaWarps * kRing + (kXShared ? kXSharedMax : 0),
                                smem_per_block());
      HIBANA_CUDA(
          cudaFuncSetAttribute(kernel(), cudaFuncAttributeMaxDynamicSharedMemorySize, want));
      return want;
    }();
    return limit;
  }
  // Its CTAs of `smem` bytes that fit one SM (the occupancy API: registers and threads as well
  // as shared memory), kept for the last size asked, which a decode step asks again.
  static int per_sm(size_t smem) {
    static std::atomic<uint64_t> last{0};  // smem << 8 | CTAs
    const uint64_t seen = last.load(std::memory_order_relaxed);
    if (seen >> 8 == smem) return static_cast<int>(seen & 0xff);
    int n = 0;
    HIBANA_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel(), kCtaWarps * 32, smem));
    last.store(static_cast<uint64_t>(smem) << 8 | static_cast<uint64_t>(std::min(n, 255)),
               std::memory_order_relaxed);
    return n;
  }
  // Launches p where its CTAs, with x_bytes of shared activations, run in one wave (plain) or
  // fit an SM (grouped).
  static bool launch(const Params& p, int x_rows, size_t x_bytes, int groups = 1) {
    const size_t smem = kCtaWarps * kRing + x_bytes;
    if (smem > static_cast<size_t>(smem_limit())) return false;
    const int64_t ctas = (p.N + kCtaRows - 1) / kCtaRows;
    if (!kGrouped && ctas > static_cast<int64_t>(per_sm(smem)) * num_sms()) return false;
    const dim3 grid(static_cast<unsigned>(ctas), 1, static_cast<unsigned>(groups));
    launch_pdl(kernel(), grid, dim3(kCtaWarps * 32), smem, p, x_rows);
    launched("gemv_kernel");
    g_one_cta_products.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
};

// kCtaSplits: a product in 2, 3, 4 or 8 splits, of one row with its activations shared
// beside rings of kSmallRingPerWarp (fp8 6 KiB, bf16 10 KiB; a grouped launch's split before
// its wait where p.x_early), or of more rows with each warp's own (the kRows 8 kernel's way):
// plain products at 3 to 8 rows, where the CTAs run in one wave (2 rows keep the
// split-parallel kernel: one kernel fewer of each kind), grouped ones at 2 to 8 in 2 splits.
// Returns whether it launched.
template <Elt E, Fused kFused, int kSplits, bool kGrouped = false>
bool launch_cta_splits(const Params& p, int x_rows, int groups = 1) {
  if (x_rows > (kGrouped ? 1 : 2)) {
    if constexpr (kGrouped && kSplits != 2) {
      return false;  // (launch_grouped_cta_splits)
    } else {
      return CtaKernel<E, false, 8, kRingPerWarp<E, false>, kFused, kSplits, kGrouped>::launch(
          p, x_rows, 0, groups);
    }
  }
  constexpr int kRing = kSmallRingPerWarp<E, true>;
  const size_t x_bytes = 3 * Gemv<E, kRing>::plane_pitch_bytes(kSplits * p.split_len);
  if (x_rows != 1 || x_bytes > static_cast<size_t>(kXSharedMax)) return false;
  if constexpr (kGrouped) {
    if (p.x_early) {
      return CtaKernel<E, true, 1, kRing, kFused, kSplits, true, true>::launch(p, 1, x_bytes,
                                                                               groups);
    }
  }
  return CtaKernel<E, true, 1, kRing, kFused, kSplits, kGrouped>::launch(p, 1, x_bytes, groups);
}
template <Elt E, Fused kFused>
bool launch_cta_splits(const Params& p, int x_rows) {
  switch (p.splits) {
    case 2:
      return launch_cta_splits<E, kFused, 2>(p, x_rows);
    case 3:
      return launch_cta_splits<E, kFused, 3>(p, x_rows);
    case 4:
      return launch_cta_splits<E, kFused, 4>(p, x_rows);
    case 8:
      return launch_cta_splits<E, kFused, 8>(p, x_rows);
    default:
      return false;
  }
}
template <Elt E>
bool launch_cta_splits(const Params& p, int x_rows) {
  return p.conv_w != nullptr ? launch_cta_splits<E, Fused::conv>(p, x_rows)
                             : launch_cta_splits<E, Fused::none>(p, x_rows);
}

// kCtaSplits for grouped fp8 SwiGLU (an MoE layer's gate/up): in 2 splits at 1-8 tokens, in 4
// at one. 2 splits against the split-parallel kernel in the same splits: 1.066 on the 80B at
// batch 1, 1.033 at 8 (docs/benchmarks.md, twenty-seventh slice). 4 splits (the 80B's gate/up,
// since grouped fp8 products take 32 tiles), H100, against its one split before: 1.019 at
// batch 1 in one CTA; at batch 8 split-parallel 1.004, one CTA per row group's splits
// 0.969-0.971, each warp running the splits in turn 0.993 (twenty-eighth slice).
bool launch_grouped_cta_splits(const Params& p, Elt elt, int x_rows, int groups) {
  if (elt != Elt::fp8 || p.pair == 0) return false;
  if (p.splits == 2) return launch_cta_splits<Elt::fp8, Fused::swiglu, 2, true>(p, x_rows, groups);
  return p.splits == 4 && x_rows == 1 &&
         launch_cta_splits<Elt::fp8, Fused::swiglu, 4, true>(p, 1, groups);
}

// A kernel for 1, 2 (both packed) or up to 8 rows a group; p.pair the SwiGLU one, p.conv_w the
// conv. Grouped products in one split (the 80B's down projections; bf16 experts) take kernels
// without the split-K reduction's code (-4.5 KB of the grouped fp8 kernels' ~50); plain ones
// keep it (the 80B's in-, out- and q/k/v projections run 4-8 splits at batch 1).
template <Elt E, bool kGrouped, Fused kFused, bool kOneSplit>
void launch_by_rows(const Params& p, int groups, int x_rows) {
  x_rows <= 1   ? launch<E, kGrouped, 1, kFused, kOneSplit>(p, groups, x_rows)
  : x_rows <= 2 ? launch<E, kGrouped, 2, kFused, kOneSplit>(p, groups, x_rows)
                : launch<E, kGrouped, 8, kFused, kOneSplit>(p, groups, x_rows);
}
template <Elt E, bool kGrouped, Fused kFused>
void launch_fused(const Params& p, int groups, int x_rows) {
  if constexpr (kGrouped) {
    if (p.splits == 1) return launch_by_rows<E, true, kFused, true>(p, groups, x_rows);
  }
  launch_by_rows<E, kGrouped, kFused, false>(p, groups, x_rows);
}
template <Elt E, bool kGrouped>
void launch_rows(const Params& p, int groups, int x_rows) {
  if (p.pair > 0) return launch_fused<E, kGrouped, Fused::swiglu>(p, groups, x_rows);
  if constexpr (!kGrouped) {
    if (p.conv_w != nullptr) return launch_fused<E, false, Fused::conv>(p, groups, x_rows);
  }
  assert(p.conv_w == nullptr);
  launch_fused<E, kGrouped, Fused::none>(p, groups, x_rows);
}

}  // namespace

void run_gemv(Params& p, Elt elt, bool grouped, int64_t max_rows, int groups) {
  // On by default (80B decode +1.7% at batch 1, +0.5% at 8; the 8B's unchanged:
  // docs/benchmarks.md, fifteenth slice); =0 releases at the loop's end. Read at every call.
  // Where the next kernel launches does not change what it computes: it still waits for this
  // one to finish.
  p.release_early = knob_on("HIBANA_CUDA_EARLY_RELEASE", true);
  const int x_rows = static_cast<int>(std::min<int64_t>(max_rows, 8));
  // A product's splits in one CTA where they fit (on by default; HIBANA_CUDA_CTA_SPLITS=0: the
  // split-parallel way, read at every call): plain products but SwiGLU's paired rows, and
  // grouped fp8 SwiGLU.
  if (p.splits > 1 && knob_on("HIBANA_CUDA_CTA_SPLITS", true)) {
    if (grouped) {
      if (launch_grouped_cta_splits(p, elt, x_rows, groups)) return;
    } else if (p.pair == 0 && (elt == Elt::bf16 ? launch_cta_splits<Elt::bf16>(p, x_rows)
                                                : launch_cta_splits<Elt::fp8>(p, x_rows))) {
      return;
    }
  }
  std::unique_ptr<Scratch> partial;
  if (p.splits > 1) partial = split_scratch(p, kRowsPerCta, 8, 8, groups);
  if (elt == Elt::bf16) {
    grouped ? launch_rows<Elt::bf16, true>(p, groups, x_rows)
            : launch_rows<Elt::bf16, false>(p, groups, x_rows);
  } else {
    grouped ? launch_rows<Elt::fp8, true>(p, groups, x_rows)
            : launch_rows<Elt::fp8, false>(p, groups, x_rows);
  }
}

}  // namespace hibana::cuda::mm

namespace hibana {
int64_t cuda_one_cta_split_products() {
  return cuda::mm::g_one_cta_products.load(std::memory_order_relaxed);
}
}  // namespace hibana
