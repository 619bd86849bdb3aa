// Prefill products by cuBLASLt (Backend::set_prefill_rows): the rows of a pass's prefill
// blocks as bf16 terms times bf16 weights (fp8 weights expanded to bf16 with their block
// scales first, in two planes with two or three terms), f32 accumulation and output.
// HIBANA_CUDA_CUBLAS_PREFILL=2, the default, carries the activations in two bf16 terms (~2^-18
// of each left out) in two products into the same output (three for a block-scaled fp8
// weight): every golden holds, and the 8B's 8k prefill ran 1.27 times as fast as with =3, the
// decode kernels' three terms in three products (four), on an H100 (docs/benchmarks.md,
// thirty-sixth slice); =1 rounds them to one term (the goldens' 1e-3 does not hold), =0 turns
// cuBLASLt off. The tiled kernel keeps every path's bits by carrying the three terms at ~75
// TFLOP/s on an H100; cuBLASLt runs these shapes at 665-780 (docs/benchmarks.md, thirty-third
// slice).
//
// The bits of a row must not depend on how many rows the product has (the pass's other
// sequences, how the prompt was cut into chunks of whole blocks): each (weight shape, output
// pitch) takes one algorithm, chosen once for a reference row count with no split-K reduction
// and 16-byte alignment, and every later product of that shape runs it whatever its rows.
// Within one algorithm an output element's sum runs over K in the same order in any tile.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Error(ErrorKind::internal,
                std::string("cuBLASLt: ") + what + " failed (status " + std::to_string(s) + ")");
  }
}

// The process's cuBLASLt handle and workspace, and the algorithm of each product shape, per
// device.
struct LtState {
  struct Algo {
    bool found;  // false: none (those products keep the tiled kernel)
    cublasLtMatmulAlgo_t algo;
  };
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Algo> algos;  // by (N, K, ldo)
  // Whether the shape's algorithm takes m rows (cublasLtMatmulAlgoCheck), by (N, K, ldo, m).
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, bool> takes_rows;
};
constexpr size_t kWorkspace = size_t(32) << 20;
std::mutex g_mutex;
std::map<int, LtState> g_states;

LtState& lt_state() {
  int dev = 0;
  HIBANA_CUDA(cudaGetDevice(&dev));
  LtState& s = g_states[dev];
  if (!s.handle) {
    check_lt(cublasLtCreate(&s.handle), "cublasLtCreate");
    HIBANA_CUDA(cudaMalloc(&s.workspace, kWorkspace));
  }
  return s;
}

// The descriptors of one product D[m, N] (f32, row pitch ldo) = X[m, K] (bf16, dense) ·
// W[N, K]ᵀ (bf16, dense), column-major as cuBLASLt sees them: Dᵀ [N, m] = op_T(W as [K, N])
// · Xᵀ [K, m].
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  Descs(int64_t m, int64_t N, int64_t K, int64_t ldo) {
    check_lt(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "a matmul descriptor");
    const cublasOperation_t t = CUBLAS_OP_T;
    check_lt(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)),
             "the weight's transpose");
    check_lt(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, K, N, K), "the weight's layout");
    check_lt(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, K, m, K), "the activations' layout");
    check_lt(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, N, m, ldo), "the output's layout");
  }
  ~Descs() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

// The algorithm of products of shape (N, K, ldo): the heuristic's first for kReferenceRows rows,
// without split-K reductions (whose partial sums depend on the grid) and for 16-byte aligned
// operands; false where there is none.
constexpr int64_t kReferenceRows = 4096;
bool algo_for(LtState& s, int64_t N, int64_t K, int64_t ldo, cublasLtMatmulAlgo_t& algo) {
  const auto key = std::make_tuple(N, K, ldo);
  if (auto it = s.algos.find(key); it != s.algos.end()) {
    algo = it->second.algo;
    return it->second.found;
  }
  Descs d(kReferenceRows, N, K, ldo);
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "a preference");
  const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE, align = 16;
  const uint64_t ws = kWorkspace;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none,
                                       sizeof(none));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  }
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(s.handle, d.op, d.a, d.b, d.c, d.c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // (The mask should keep split-K out; an algorithm that splits K anyway is refused.)
  int32_t splits = 1;
  size_t written = 0;
  const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0 &&
                  cublasLtMatmulAlgoConfigGetAttribute(&res.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                       &splits, sizeof(splits), &written) ==
                      CUBLAS_STATUS_SUCCESS &&
                  splits <= 1;
  s.algos.emplace(key, LtState::Algo{ok, res.algo});
  algo = res.algo;
  return ok;
}

// x [m, K] f32 (row pitch ldx) as kTerms dense bf16 planes [m, K]: the value rounded (h), then
// (kTerms 2 or 3) what it leaves (m = x - h rounded) and (kTerms 3) what those two leave (l),
// the decode kernels' three terms. Rows over the grid's y, k over its x.
template <int kTerms>
__global__ void to_bf16_kernel(const float* x, int64_t ldx, int64_t m, int64_t K,
                               __nv_bfloat16* out) {
  pdl_start();
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < K;
         k += int64_t(gridDim.x) * blockDim.x) {
      const float v = x[r * ldx + k];
      const __nv_bfloat16 h = __float2bfloat16_rn(v);
      out[r * K + k] = h;
      if constexpr (kTerms >= 2) {
        const float rest = v - __bfloat162float(h);
        const __nv_bfloat16 mid = __float2bfloat16_rn(rest);
        out[m * K + r * K + k] = mid;
        if constexpr (kTerms == 3) {
          out[2 * m * K + r * K + k] = __float2bfloat16_rn(rest - __bfloat162float(mid));
        }
      }
    }
  }
}

// A weight [N, K] (bf16, or fp8 with block scales of block_rows x block_cols, f32 or bf16,
// scale row pitch scale_ld) as dense bf16: an fp8 value times its block's scale, rounded (the
// plane at out), and with `lo` what that rounding left, rounded (the plane at lo): the two
// carry the scaled weight to ~16 bits where one bf16 would round it to 8 (the tiled and decode
// kernels multiply a block's f32 sum by its scale).
template <bool kFp8>
__global__ void weight_bf16_kernel(const void* w, int64_t ldw, int64_t N, int64_t K,
                                   const void* scale, bool scale_f32, int64_t scale_ld,
                                   int64_t block_rows, int64_t block_cols, __nv_bfloat16* out,
                                   __nv_bfloat16* lo) {
  pdl_start();
  for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < K;
         k += int64_t(gridDim.x) * blockDim.x) {
      if constexpr (kFp8) {
        __nv_fp8_e4m3 v;
        v.__x = static_cast<const uint8_t*>(w)[r * ldw + k];
        float sc = 1.0f;
        if (scale) {
          const int64_t j = (r / block_rows) * scale_ld + k / block_cols;
          sc = scale_f32 ? static_cast<const float*>(scale)[j]
                         : __bfloat162float(static_cast<const __nv_bfloat16*>(scale)[j]);
        }
        const float ws = static_cast<float>(v) * sc;
        const __nv_bfloat16 h = __float2bfloat16_rn(ws);
        out[r * K + k] = h;
        if (lo) lo[r * K + k] = __float2bfloat16_rn(ws - __bfloat162float(h));
      } else {
        out[r * K + k] = static_cast<const __nv_bfloat16*>(w)[r * ldw + k];
      }
    }
  }
}

// A grid of `rows` x K elements: 256 threads a block along K, a row a block along y.
dim3 grid_for(int64_t rows, int64_t K) {
  return dim3(static_cast<unsigned>(std::min<int64_t>((K + 255) / 256, 16)),
              static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

namespace {
// The activations' bf16 terms the products carry (HIBANA_CUDA_CUBLAS_PREFILL): 0 (off), 1, 2
// (unset or any other value) or 3.
int cublas_terms() {
  if (!knob_on("HIBANA_CUDA_CUBLAS_PREFILL", true)) return 0;
  const int64_t t = knob("HIBANA_CUDA_CUBLAS_PREFILL", 2);
  return t == 1 || t == 3 ? static_cast<int>(t) : 2;
}
}  // namespace

bool cublas_takes(const Tensor& x, const Weight& w, const Tensor& out) {
  if (cublas_terms() == 0) return false;
  const DType t = w.w.dtype;
  if (t != DType::bf16 && t != DType::f8_e4m3) return false;
  if (t == DType::bf16 && !w.scale.empty()) return false;
  if (x.dtype != DType::f32 || out.dtype != DType::f32 || x.stride[1] != 1 ||
      out.stride[1] != 1 || w.w.stride[1] != 1 || x.shape[1] != w.cols() ||
      out.shape[1] != w.rows()) {
    return false;
  }
  // 16-byte aligned rows of the output (its pointer is checked per product) and weights.
  if (out.stride[0] % 4 != 0 || w.cols() % 8 != 0) return false;
  if (t == DType::f8_e4m3 && !w.scale.empty() && w.block_rows <= 0) return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  LtState& s = lt_state();
  cublasLtMatmulAlgo_t algo;
  return algo_for(s, w.rows(), w.cols(), out.stride[0], algo);
}

bool matmul_cublas(const Tensor& x, const Weight& w, Tensor out) {
  const int64_t m = x.shape[0], N = w.rows(), K = w.cols(), ldo = out.stride[0];
  if (m == 0) return true;
  check(aligned16(out.data), ErrorKind::internal, "matmul_cublas: the output is not aligned");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    LtState& s = lt_state();
    const auto key = std::make_tuple(N, K, ldo, m);
    auto it = s.takes_rows.find(key);
    if (it == s.takes_rows.end()) {
      cublasLtMatmulAlgo_t algo;
      bool ok = algo_for(s, N, K, ldo, algo);
      if (ok) {
        Descs d(m, N, K, ldo);
        cublasLtMatmulHeuristicResult_t res{};
        ok = cublasLtMatmulAlgoCheck(s.handle, d.op, d.a, d.b, d.c, d.c, &algo, &res) ==
                 CUBLAS_STATUS_SUCCESS &&
             res.workspaceSize <= kWorkspace;
      }
      it = s.takes_rows.emplace(key, ok).first;
    }
    if (!it->second) return false;
  }
  const int terms = cublas_terms();
  Scratch xb(static_cast<size_t>(terms * m * K) * 2, true);
  launch_pdl(terms == 3   ? to_bf16_kernel<3>
             : terms == 2 ? to_bf16_kernel<2>
                          : to_bf16_kernel<1>,
             grid_for(m, K), dim3(256), 0,
             x.ptr<float>(), x.stride[0], m, K, xb.as<__nv_bfloat16>());
  launched("to_bf16_kernel");
  // bf16 weights as they are where dense and aligned; fp8 (and the others) expanded.
  const bool fp8 = w.w.dtype == DType::f8_e4m3;
  const bool as_is = !fp8 && w.w.stride[0] == K && aligned16(w.w.data);
  // A scaled fp8 weight in two bf16 planes where the activations have two or three terms, the
  // second plane's product with the first term only: the scaled weight to ~2^-16 (the second
  // plane's rounding; its products with the other terms, each under 2^-16 of the product, are
  // left out), where one plane left 2^-9.
  const bool two = fp8 && !w.scale.empty() && terms >= 2;
  Scratch wb(as_is ? 0 : static_cast<size_t>((two ? 2 : 1) * N * K) * 2, true);
  if (!as_is) {
    const void* sc = w.scale.empty() ? nullptr : w.scale.data;
    const bool sc_f32 = !w.scale.empty() && w.scale.dtype == DType::f32;
    const int64_t sc_ld = w.scale.empty() ? 0 : w.scale.stride[w.scale.ndim - 2];
    launch_pdl(fp8 ? weight_bf16_kernel<true> : weight_bf16_kernel<false>,
               grid_for(N, K), dim3(256), 0, static_cast<const void*>(w.w.data),
               w.w.stride[0], N, K, sc, sc_f32, sc_ld, w.block_rows, w.block_cols,
               wb.as<__nv_bfloat16>(), two ? wb.as<__nv_bfloat16>() + N * K : nullptr);
    launched("weight_bf16_kernel");
  }
  const void* wptr = as_is ? w.w.data : wb.as<void>();
  std::lock_guard<std::mutex> lock(g_mutex);
  LtState& s = lt_state();
  cublasLtMatmulAlgo_t algo;
  check(algo_for(s, N, K, ldo, algo), ErrorKind::internal,
        "matmul_cublas: no cuBLASLt algorithm (cublas_takes was not asked)");
  Descs d(m, N, K, ldo);
  // The terms smallest first, each product added to the sum so far (beta 1); with two weight
  // planes, the first term times the second plane before them.
  const float alpha = 1.0f, zero = 0.0f, one = 1.0f;
  bool first = true;
  auto product = [&](const void* wp, int t) {
    const void* xt = xb.as<__nv_bfloat16>() + t * m * K;
    check_lt(cublasLtMatmul(s.handle, d.op, &alpha, wp, d.a, xt, d.b, first ? &zero : &one,
                            out.data, d.c, out.data, d.c, &algo, s.workspace, kWorkspace,
                            stream()),
             "cublasLtMatmul");
    first = false;
  };
  if (two) product(wb.as<__nv_bfloat16>() + N * K, 0);
  for (int t = terms - 1; t >= 0; --t) product(wptr, t);
  return true;
}

}  // namespace hibana::cuda
