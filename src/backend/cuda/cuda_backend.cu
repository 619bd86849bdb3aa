// The CUDA backend: device memory for the rest of the program (registered with core/), the
// stream every op runs on, and the Backend whose ops live in the other .cu files.
#include <cuda_runtime.h>
#include <cuda_profiler_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/capture_arena.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/fusion_switches.h"
#include "backend/cuda/host_copies.h"
#include "backend/cuda/op_timer.h"
#include "backend/cuda/ops.h"
#include "core/device_memory.h"
#include "core/log.h"

namespace hibana {

namespace cuda {

void throw_cuda(cudaError_t e, const char* what) {
  const ErrorKind kind =
      e == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::internal;
  throw Error(kind, std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

void warn_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  log_warn("CUDA: ", what, ": ", cudaGetErrorString(e));
}

namespace {
cudaStream_t g_stream = nullptr;
// A thread recording a graph records on a stream of its own (so that no other thread's work
// on g_stream lands in its graph, nor its work in theirs); its allocations come from the arena.
thread_local cudaStream_t t_capture = nullptr;
}  // namespace

// A non-blocking stream of our own (not the legacy default stream), so that work can later be
// captured into CUDA graphs and overlapped with copies on other streams.
cudaStream_t stream() {
  return t_capture ? t_capture : g_stream;
}

namespace {

int g_num_sms = 0;
int g_smem_optin = 0;  // the GPU's shared memory opt-in limit per block
bool g_pdl = false;  // the device runs programmatic dependent launches

// Buffers of at least this size come from cudaMalloc (weights, state pools); smaller ones from
// the stream-ordered pool, which keeps freed memory for reuse.
constexpr size_t kLargeAllocation = size_t(32) << 20;

CaptureArena g_arena;

// The stream-ordered pool keeps what was freed (its release threshold is the maximum), in
// blocks a request may not fit or, for a cudaMalloc, out of its reach: once the stream's frees
// are done, its idle memory goes back to the driver. True: the request may be made again. (A
// prefill's pre-split planes left an H100 holding the 80B without a later op's 128 MiB.)
bool trim_pool() {
  int device = 0;
  cudaMemPool_t pool;
  return cudaStreamSynchronize(stream()) == cudaSuccess && cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetMemPool(&pool, device) == cudaSuccess &&
         cudaMemPoolTrimTo(pool, 0) == cudaSuccess;
}

std::atomic<int64_t> g_pool_trims{0};

// pooled: from the stream-ordered pool whatever the size (Scratch says when).
void* device_allocate(size_t bytes, bool pooled = false) {
  if (t_capture) {
    if (void* p = g_arena.allocate(bytes)) return p;
  }
  void* p = nullptr;
  const bool large = bytes >= kLargeAllocation && !t_capture && !pooled;
  auto attempt = [&] {
    return large ? cudaMalloc(&p, bytes) : cudaMallocAsync(&p, bytes, stream());
  };
  cudaError_t e = attempt();
  if (e != cudaSuccess && !t_capture) {
    cudaGetLastError();
    g_pool_trims.fetch_add(1, std::memory_order_relaxed);
    if (trim_pool()) e = attempt();
  }
  if (e != cudaSuccess) {
    cudaGetLastError();  // reset the runtime's last-error state so later calls do not see it
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    throw Error(ErrorKind::out_of_memory,
                "could not allocate " + std::to_string(bytes >> 20) + " MiB of GPU memory (" +
                    std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total >> 20) +
                    " MiB): " + cudaGetErrorString(e));
  }
  return p;
}

}  // namespace

int64_t pool_trims() {
  return g_pool_trims.load(std::memory_order_relaxed);
}

namespace {

void device_release(void* p, size_t bytes, bool pooled = false) {
  if (g_arena.release(p)) return;
  if (bytes >= kLargeAllocation && !t_capture && !pooled) {
    warn_cuda(cudaFree(p), "cudaFree");
  } else {
    warn_cuda(cudaFreeAsync(p, stream()), "cudaFreeAsync");
  }
}

}  // namespace

namespace {
// Compiled like every kernel of the backend: tells which PTX architecture the running code was
// built for. pdl_wait() exists only from sm_90 on, so a build for older architectures running
// on a newer GPU (PTX compiled at load) must not launch programmatically: nothing would wait.
__global__ void pdl_probe_kernel() {}
}  // namespace

bool pdl_enabled() {
  static const bool off = [] {
    const char* env = std::getenv("HIBANA_CUDA_PDL");
    return env && std::string(env) == "0";
  }();
  return g_pdl && !off;
}

namespace {
// Every scratch from the stream-ordered pool (which keeps a prefill's largest buffers for the
// next pass) rather than cudaMalloc/cudaFree above 32 MiB, whose cudaFree waits for the device:
// with the chunked DeltaNet the 80B's 8k-token prefill on an H100 went 2903 -> 3711 tokens/s.
// HIBANA_CUDA_POOLED_SCRATCH=0 (read once) goes back to cudaFree for the large ones.
bool all_scratch_pooled() {
  static const bool all = knob_on("HIBANA_CUDA_POOLED_SCRATCH", true);
  return all;
}
}  // namespace

Scratch::Scratch(size_t bytes, bool pooled)
    : bytes_(bytes), pooled_(pooled || all_scratch_pooled()) {
  if (bytes) p_ = device_allocate(bytes, pooled_);
}
Scratch::~Scratch() {
  if (p_) device_release(p_, bytes_, pooled_);
}

namespace {

class CudaMemory final : public DeviceMemory {
 public:
  void* allocate(size_t bytes) override { return device_allocate(bytes); }
  void release(void* p, size_t bytes) override { device_release(p, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    HIBANA_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
    HIBANA_CUDA(cudaStreamSynchronize(stream()));
  }
  void copy_async(void* dst, const void* src, size_t bytes) override {
    HIBANA_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream()));
  }
  void copy_batch(const std::vector<ByteCopy>& copies, bool to_host) override {
    host_copies::copy_batch(copies, to_host);
  }
  void* allocate_pinned(size_t bytes) override { return host_copies::allocate_pinned(bytes); }
  void release_pinned(void* p, size_t bytes) override { host_copies::release_pinned(p, bytes); }
  void zero(void* p, size_t bytes) override { HIBANA_CUDA(cudaMemsetAsync(p, 0, bytes, stream())); }
  void synchronize() override { HIBANA_CUDA(cudaStreamSynchronize(stream())); }
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    HIBANA_CUDA(cudaSetDevice(device));
    cudaDeviceProp prop{};
    HIBANA_CUDA(cudaGetDeviceProperties(&prop, device));
    check(prop.major >= 8, ErrorKind::unsupported,
          std::string("GPU ") + prop.name + " has compute capability " +
              std::to_string(prop.major) + "." + std::to_string(prop.minor) +
              "; Hibana's kernels need 8.0 (Ampere) or newer");
    name_ = std::string("cuda:") + prop.name;
    integrated_ = prop.integrated != 0;
    if (!g_stream) HIBANA_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    g_num_sms = prop.multiProcessorCount;
    g_smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
    cudaFuncAttributes probe{};
    g_pdl = prop.major >= 9 && cudaFuncGetAttributes(&probe, pdl_probe_kernel) == cudaSuccess &&
            probe.ptxVersion >= 90;
    cudaGetLastError();
    cudaMemPool_t pool;
    HIBANA_CUDA(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;
    HIBANA_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    static CudaMemory memory;
    register_device_memory(Device::cuda, &memory);
  }

  Device device() const override { return Device::cuda; }
  std::string name() const override { return name_; }
  void synchronize() override { HIBANA_CUDA(cudaStreamSynchronize(cuda::stream())); }
  bool unified_memory() const override { return integrated_; }
  MemoryInfo memory_info() override {
    size_t free_b = 0, total = 0;
    HIBANA_CUDA(cudaMemGetInfo(&free_b, &total));
    return {static_cast<int64_t>(free_b), static_cast<int64_t>(total), cuda::pool_trims()};
  }
  std::string timing_report() override { return timer_.on() ? timer_.report() : std::string(); }

  // Timed ops record events, which a graph cannot replay; HIBANA_CUDA_GRAPHS=0 turns graphs off.
  bool can_capture() const override {
    static const bool off = [] {
      const char* env = std::getenv("HIBANA_CUDA_GRAPHS");
      return env && std::string(env) == "0";
    }();
    return !off && !timer_.on();
  }
  void begin_capture() override {
    g_arena.reserve();
    thread_local cudaStream_t recording = [] {
      cudaStream_t s = nullptr;
      HIBANA_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      return s;
    }();
    HIBANA_CUDA(cudaStreamBeginCapture(recording, cudaStreamCaptureModeRelaxed));
    t_capture = recording;
  }
  std::shared_ptr<void> end_capture() override {
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(cuda::stream(), &graph);
    t_capture = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (e == cudaSuccess && graph) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess || !exec) {
      cudaGetLastError();  // clear the failed capture's error state
      log_warn("CUDA graph capture failed (", cudaGetErrorString(e), "); running ops one by one");
      return nullptr;
    }
    return std::shared_ptr<void>(
        exec, [](void* x) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(x)); });
  }
  // HIBANA_CUDA_PROFILE_REPLAY=N brackets the N-th replay (from 1) with cudaProfilerStart/Stop,
  // so that `ncu --profile-from-start off --graph-profiling node` measures one decode step's
  // kernels and nothing else (not the weight set-up, not the prefill).
  void replay(const std::shared_ptr<void>& graph) override {
    static const int64_t profiled = [] {
      const char* env = std::getenv("HIBANA_CUDA_PROFILE_REPLAY");
      return env ? std::atoll(env) : 0;
    }();
    const bool profile = profiled > 0 && ++replays_ == profiled;
    if (profile) HIBANA_CUDA(cudaProfilerStart());
    HIBANA_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), cuda::stream()));
    if (profile) {
      synchronize();
      HIBANA_CUDA(cudaProfilerStop());
    }
  }

  double copy_bandwidth() override {
    const size_t bytes = size_t(1) << 30;
    Buffer a(bytes, Device::cuda), b(bytes, Device::cuda);
    cudaEvent_t e0, e1;
    HIBANA_CUDA(cudaEventCreate(&e0));
    HIBANA_CUDA(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int rep = 0; rep < 6; ++rep) {
      HIBANA_CUDA(cudaEventRecord(e0, cuda::stream()));
      HIBANA_CUDA(
          cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, cuda::stream()));
      HIBANA_CUDA(cudaEventRecord(e1, cuda::stream()));
      HIBANA_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      HIBANA_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      if (rep > 0) best = std::min(best, ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 2.0 * static_cast<double>(bytes) / (best * 1e-3);
  }

  void embedding(const Weight& table, const Tensor& ids, Tensor out) override {
    Timed timed(timer_, "embedding");
    cuda::embedding(table, ids, out);
  }
  void rmsnorm(const Tensor& x, const Tensor& w, float eps, bool zero_centred,
               Tensor out) override {
    Timed timed(timer_, "rmsnorm");
    cuda::rmsnorm(x, w, eps, zero_centred, out);
  }
  void add_rmsnorm(Tensor x, const Tensor& y, const Tensor& w, float eps, bool zero_centred,
                   Tensor out) override {
    Timed timed(timer_, "add_rmsnorm");
    cuda::add_rmsnorm(x, y, w, eps, zero_centred, out);
  }
  void matmul(const Tensor& x, const Weight& w, Tensor out) override {
    if (prefill_tokens_ > 0 && x.shape[0] == prefill_tokens_ &&
        reinterpret_cast<uintptr_t>(out.data) % 16 == 0 && cuda::cublas_takes(x, w, out)) {
      return matmul_prefill_rows(x, w, out);
    }
    Timed timed(timer_, "matmul");
    cuda::matmul(x, w, out);
  }
  void set_prefill_rows(int64_t tokens, std::vector<RowRange> rows) override {
    prefill_tokens_ = rows.empty() ? 0 : tokens;
    prefill_rows_ = std::move(rows);
    prefill_mask_.reset();
    prefill_terms_ = grouped_prefill_terms();
    if (prefill_tokens_ > 0 && prefill_terms_ < 3) {
      prefill_mask_ = std::make_unique<cuda::Scratch>(static_cast<size_t>(tokens), true);
      cuda::mark_prefill_tokens(prefill_rows_, tokens, prefill_mask_->as<uint8_t>());
    }
  }
  void gather_columns(const Tensor& x, const Tensor& index, Tensor out) override {
    Timed timed(timer_, "gather_columns");
    cuda::gather_columns(x, index, out);
  }
  void rope(Tensor x, int64_t heads, int64_t head_dim, int64_t rot_dim, double theta,
            const BatchLayout& layout) override {
    Timed timed(timer_, "rope");
    cuda::rope(x, heads, head_dim, rot_dim, theta, layout);
  }
  void add(Tensor x, const Tensor& y) override {
    Timed timed(timer_, "add");
    cuda::add(x, y);
  }
  void mul_sigmoid(Tensor x, const Tensor& g) override {
    Timed timed(timer_, "mul_sigmoid");
    cuda::mul_sigmoid(x, g);
  }
  void add_sigmoid_scaled(Tensor x, const Tensor& y, const Tensor& g) override {
    Timed timed(timer_, "add_sigmoid_scaled");
    cuda::add_sigmoid_scaled(x, y, g);
  }
  void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) override {
    Timed timed(timer_, "silu_mul");
    cuda::silu_mul(gate, up, out);
  }
  void matmul_swiglu(const Tensor& x, const Weight& gate_up, Tensor out) override {
    if (fused_swiglu() && cuda::matmul_swiglu_fits(x, gate_up, out)) {
      Timed timed(timer_, "matmul_swiglu");
      return cuda::matmul_swiglu(x, gate_up, out);
    }
    Backend::matmul_swiglu(x, gate_up, out);
  }
  void store_kv(const Tensor& k, const Tensor& v, Tensor k_pages, Tensor v_pages,
                const BatchLayout& layout) override {
    Timed timed(timer_, "store_kv");
    cuda::store_kv(k, v, k_pages, v_pages, layout);
  }
  void attention_prep(Tensor q, Tensor k, const Tensor& v, const Tensor& q_norm,
                      const Tensor& k_norm, const AttentionPrep& a, Tensor k_pages,
                      Tensor v_pages, const BatchLayout& layout) override {
    if (!cuda::attention_prep_fits(q, k, v, q_norm, k_norm, a, k_pages)) {
      return Backend::attention_prep(q, k, v, q_norm, k_norm, a, k_pages, v_pages, layout);
    }
    Timed timed(timer_, "attention_prep");
    cuda::attention_prep(q, k, v, q_norm, k_norm, a, k_pages, v_pages, layout);
  }
  void attention(const Tensor& q, int64_t heads, const Tensor& k_pages, const Tensor& v_pages,
                 float scale, const BatchLayout& layout, Tensor out) override {
    Timed timed(timer_, "attention");
    cuda::attention(q, heads, k_pages, v_pages, scale, layout, out, nullptr,
                    pass_rows(layout.num_tokens));
  }
  void attention_gated(const Tensor& q, int64_t heads, const Tensor& k_pages,
                       const Tensor& v_pages, float scale, const BatchLayout& layout,
                       const Tensor& gate, Tensor out) override {
    if (!fused_attention_gate()) {
      return Backend::attention_gated(q, heads, k_pages, v_pages, scale, layout, gate, out);
    }
    Timed timed(timer_, "attention_gated");
    cuda::attention(q, heads, k_pages, v_pages, scale, layout, out, &gate,
                    pass_rows(layout.num_tokens));
  }
  void gdn_conv(const Tensor& x, const Tensor& w, Tensor conv_states, const BatchLayout& layout,
                Tensor out) override {
    Timed timed(timer_, "gdn_conv");
    cuda::gdn_conv(x, w, conv_states, layout, out);
  }
  void gdn_recurrence(const Tensor& qkv, const Tensor& b, const Tensor& a, const Tensor& A_log,
                      const Tensor& dt_bias, const GdnShape& shape, Tensor states,
                      const BatchLayout& layout, Tensor out) override {
    Timed timed(timer_, "gdn_recurrence");
    cuda::gdn_recurrence(qkv, b, a, A_log, dt_bias, shape, states, layout, out);
  }
  void gated_rmsnorm(const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                     Tensor out) override {
    Timed timed(timer_, "gated_rmsnorm");
    cuda::gated_rmsnorm(x, z, w, eps, out);
  }
  void matmul_conv(const Tensor& x, const Weight& w, const Tensor& conv_w, Tensor conv_states,
                   const BatchLayout& layout, Tensor out, Tensor conv_out) override {
    if (fused_matmul_conv() && cuda::matmul_conv_fits(x, w, conv_w, layout)) {
      Timed timed(timer_, "matmul_conv");
      return cuda::matmul_conv(x, w, conv_w, conv_states, layout, out, conv_out);
    }
    Backend::matmul_conv(x, w, conv_w, conv_states, layout, out, conv_out);
  }
  void moe_route(const Tensor& logits, int64_t k, bool renormalise, const Tensor& shared_gate,
                 Tensor ids, Tensor weights) override {
    Timed timed(timer_, "moe_route");
    cuda::moe_route(logits, k, renormalise, shared_gate, ids, weights);
  }
  void moe_keep_experts(Tensor ids, Tensor weights, int64_t first, int64_t count) override {
    Timed timed(timer_, "moe_keep_experts");
    cuda::moe_keep_experts(ids, weights, first, count);
  }
  void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const ExpertWeights& experts, Tensor out) override {
    Timed timed(timer_, "moe_experts");
    cuda::moe_experts(x, ids, weights, experts, out, fused_swiglu(), grouped_prefetch(),
                      prefill_terms(x.shape[0]));
  }
  void moe_route_experts(const Tensor& x, const Tensor& logits, int64_t k, bool renormalise,
                         const Tensor& shared_gate, const ExpertWeights& experts, Tensor ids,
                         Tensor weights, Tensor out, const ResidualNorm* then) override {
    // The norm joins the combine's kernel only where add_rmsnorm would be one kernel, and for a
    // decode batch (kCombineNormTokens); else it stays an op of its own after the experts.
    const bool norm = then && combine_norm_split() &&
                      x.shape[0] <= cuda::kCombineNormTokens &&
                      cuda::add_rmsnorm_is_wide(then->x, then->weight, then->normed);
    const bool route =
        fused_routing() && cuda::route_group_fits(x.shape[0], logits, shared_gate, experts);
    if (route || norm) {
      {
        Timed timed(timer_, "moe_route_experts");
        cuda::moe_route_experts(x, logits, k, renormalise, shared_gate, experts, ids, weights, out,
                                norm ? then : nullptr,
                                {route, fused_swiglu(), grouped_prefetch(), experts_x_early(),
                                 shared_expert_early(), prefill_terms(x.shape[0])});
      }
      if (then && !norm) {
        add_rmsnorm(then->x, out, then->weight, then->eps, then->zero_centred, then->normed);
      }
      return;
    }
    Backend::moe_route_experts(x, logits, k, renormalise, shared_gate, experts, ids, weights, out,
                               then);
  }
  void logits_summary(const Tensor& logits, const std::vector<float>& temperature, int64_t k,
                      Tensor out) override {
    Timed timed(timer_, "logits_summary");
    cuda::logits_summary(logits, temperature, k, out);
  }
  void penalise_rows(const Tensor& logits, const LogitsPenalties& penalties, Tensor out) override {
    Timed timed(timer_, "penalise_rows");
    cuda::penalise_rows(logits, penalties, out);
  }
  void copy_slot(Tensor states, int64_t src, int64_t dst) override {
    check(src >= 0 && dst >= 0 && src < states.shape[0] && dst < states.shape[0],
          ErrorKind::internal, "copy_slot: slot out of range");
    const size_t bytes = states.nbytes() / states.shape[0];
    char* base = static_cast<char*>(states.data);
    if (src != dst) {
      HIBANA_CUDA(cudaMemcpyAsync(base + dst * bytes, base + src * bytes, bytes,
                                  cudaMemcpyDeviceToDevice, cuda::stream()));
    }
  }

 private:
  // The pass's prefill tokens' mask and terms (HIBANA_CUDA_GROUPED_PREFILL) for an op over
  // `tokens` rows (no mask: none).
  cuda::PrefillTerms prefill_terms(int64_t tokens) const {
    if (!prefill_mask_ || tokens != prefill_tokens_) return {};
    return {prefill_mask_->as<uint8_t>(), prefill_terms_};
  }
  // The pass's prefill rows for an op over `tokens` rows: null unless they are the pass's.
  const std::vector<RowRange>* pass_rows(int64_t tokens) const {
    return prefill_tokens_ > 0 && tokens == prefill_tokens_ ? &prefill_rows_ : nullptr;
  }
  // A product over the pass's rows: its prefill rows by cuBLASLt, the rows between them by the
  // decode kernels (each row's bits whatever the others).
  void matmul_prefill_rows(const Tensor& x, const Weight& w, Tensor out) {
    auto rest = [&](int64_t b, int64_t e) {
      if (b == e) return;
      Timed timed(timer_, "matmul");
      cuda::matmul(x.slice_rows(b, e), w, out.slice_rows(b, e));
    };
    int64_t row = 0;
    for (const RowRange& r : prefill_rows_) {
      rest(row, r.begin);
      bool done;
      {
        Timed timed(timer_, "matmul_cublas");
        done = cuda::matmul_cublas(x.slice_rows(r.begin, r.end), w, out.slice_rows(r.begin, r.end));
      }
      if (!done) rest(r.begin, r.end);
      row = r.end;
    }
    rest(row, x.shape[0]);
  }

  int device_;
  bool integrated_ = false;
  int64_t replays_ = 0;
  std::string name_;
  OpTimer timer_;
  int64_t prefill_tokens_ = 0;  // set_prefill_rows: 0 outside a pass with prefill rows
  std::vector<RowRange> prefill_rows_;
  std::unique_ptr<cuda::Scratch> prefill_mask_;  // prefill_terms', for the pass
  int prefill_terms_ = 3;
};

}  // namespace

int num_sms() {
  return g_num_sms;
}

int smem_per_block() {
  const int64_t limit = knob("HIBANA_CUDA_SMEM_LIMIT", 0);
  return limit > 0 ? static_cast<int>(std::min<int64_t>(limit, g_smem_optin)) : g_smem_optin;
}
int smem_optin() { return g_smem_optin; }

}  // namespace cuda

int cuda_shared_memory_per_block() {
  return cuda::smem_per_block();
}

bool cuda_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  return std::make_unique<cuda::CudaBackend>(device);
}

}  // namespace hibana
