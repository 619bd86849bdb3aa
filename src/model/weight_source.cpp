#include "model/weight_source.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "core/device_memory.h"
#include "core/error.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"

namespace hibana {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

float to_f32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(p)[i];
    case DType::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f8_e4m3:
      return f8e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::f64:
      return static_cast<float>(static_cast<const double*>(p)[i]);
    default:
      throw Error(ErrorKind::internal, "to_f32 on a non-float dtype");
  }
}

std::shared_ptr<Buffer> new_buffer(size_t bytes) {
  return std::make_shared<Buffer>(bytes);
}

class CheckpointSource final : public WeightSource {
 public:
  explicit CheckpointSource(std::shared_ptr<Checkpoint> ck) : ck_(std::move(ck)) {
    owned.push_back(ck_);
  }

  bool has(const std::string& name) const override { return ck_->has(name); }

  Weight matrix(const std::string& name, int64_t rows, int64_t cols) override {
    const TensorInfo& info = ck_->info(name);
    expect_shape(name, info, {rows, cols});
    Weight w;
    w.w = ck_->tensor(name);
    attach_scales(name, w, 1, rows, cols);
    matrix_bytes += w.nbytes();
    return w;
  }

  std::vector<Weight> stacked(const std::string& name, int64_t count, int64_t rows,
                              int64_t cols) override {
    const TensorInfo& info = ck_->info(name);
    expect_shape(name, info, {count, rows, cols});
    Tensor all = ck_->tensor(name);
    Weight whole;
    whole.w = all;
    attach_scales(name, whole, count, rows, cols);
    std::vector<Weight> out(count);
    const size_t each = static_cast<size_t>(rows * cols) * dtype_size(all.dtype);
    for (int64_t e = 0; e < count; ++e) {
      out[e].w = Tensor(static_cast<char*>(all.data) + e * each, all.dtype, {rows, cols});
      if (!whole.scale.empty()) {
        const Tensor& s = whole.scale;  // [count, sr, sc]
        const size_t per = static_cast<size_t>(s.shape[1] * s.shape[2]) * dtype_size(s.dtype);
        out[e].scale =
            Tensor(static_cast<char*>(s.data) + e * per, s.dtype, {s.shape[1], s.shape[2]});
        out[e].block_rows = whole.block_rows;
        out[e].block_cols = whole.block_cols;
      }
    }
    matrix_bytes += whole.nbytes();
    return out;
  }

  Tensor vector_f32(const std::string& name, int64_t numel, Fill) override {
    const TensorInfo& info = ck_->info(name);
    int64_t n = 1;
    for (int64_t d : info.shape) n *= d;
    if (n != numel) {
      throw Error(ErrorKind::invalid_argument,
                  ck_->dir() + ": tensor '" + name + "' has shape " + shape_str(info.shape) +
                      " but the config needs " + std::to_string(numel) + " values");
    }
    if (!dtype_is_float(info.dtype)) {
      throw Error(ErrorKind::unsupported, ck_->dir() + ": tensor '" + name + "' has dtype " +
                                              dtype_name(info.dtype) + ", expected a float type");
    }
    Tensor src = ck_->tensor(name);
    auto buf = new_buffer(numel * sizeof(float));
    float* dst = static_cast<float*>(buf->data());
    for (int64_t i = 0; i < numel; ++i) dst[i] = to_f32(src.data, src.dtype, i);
    owned.push_back(buf);
    return Tensor(dst, DType::f32, {numel});
  }

 private:
  void expect_shape(const std::string& name, const TensorInfo& info,
                    const std::vector<int64_t>& want) {
    if (info.shape != want) {
      throw Error(ErrorKind::invalid_argument, ck_->dir() + ": tensor '" + name + "' has shape " +
                                                   shape_str(info.shape) +
                                                   " but the config needs " + shape_str(want));
    }
    if (info.dtype != DType::f32 && info.dtype != DType::bf16 && info.dtype != DType::f16 &&
        info.dtype != DType::f8_e4m3) {
      throw Error(ErrorKind::unsupported, ck_->dir() + ": tensor '" + name + "' has dtype " +
                                              dtype_name(info.dtype) +
                                              " (weights must be f32, bf16, f16 or fp8-e4m3)");
    }
  }

  // fp8 weights come with "<name>_scale_inv" (block scales, DeepSeek/Qwen style) or
  // "<name>_scale" (per-channel or per-tensor). Block sizes follow from the scale's shape.
  void attach_scales(const std::string& name, Weight& w, int64_t count, int64_t rows,
                     int64_t cols) {
    if (w.w.dtype != DType::f8_e4m3) return;
    std::string sname;
    for (const char* suffix : {"_scale_inv", "_scale"}) {
      if (ck_->has(name + suffix)) {
        sname = name + suffix;
        break;
      }
    }
    if (sname.empty()) {
      throw Error(ErrorKind::not_found, ck_->dir() + ": fp8 tensor '" + name + "' has no '" + name +
                                            "_scale_inv' or '" + name + "_scale' tensor");
    }
    const TensorInfo& si = ck_->info(sname);
    std::vector<int64_t> s = si.shape;
    if (count > 1 || (s.size() == 3)) {
      if (s.size() != 3 || s[0] != count) {
        throw Error(ErrorKind::invalid_argument,
                    ck_->dir() + ": scale '" + sname + "' has shape " + shape_str(s));
      }
      s.erase(s.begin());
    }
    while (s.size() < 2) s.push_back(1);  // per-tensor [] or [1]
    if (s.size() != 2 || s[0] <= 0 || s[1] <= 0 || s[0] > rows || s[1] > cols) {
      throw Error(ErrorKind::invalid_argument,
                  ck_->dir() + ": scale '" + sname + "' has shape " + shape_str(si.shape) +
                      ", which does not tile a " + std::to_string(rows) + "x" +
                      std::to_string(cols) + " weight");
    }
    w.block_rows = (rows + s[0] - 1) / s[0];
    w.block_cols = (cols + s[1] - 1) / s[1];
    if ((rows + w.block_rows - 1) / w.block_rows != s[0] ||
        (cols + w.block_cols - 1) / w.block_cols != s[1]) {
      throw Error(ErrorKind::invalid_argument, ck_->dir() + ": scale '" + sname + "' shape " +
                                                   shape_str(si.shape) +
                                                   " is not a whole number of blocks");
    }
    if (si.dtype != DType::f32 && si.dtype != DType::bf16) {
      throw Error(ErrorKind::unsupported,
                  ck_->dir() + ": scale '" + sname + "' has dtype " + dtype_name(si.dtype));
    }
    Tensor t = ck_->tensor(sname);
    if (count > 1 || si.shape.size() == 3) {
      w.scale = Tensor(t.data, t.dtype, {count, s[0], s[1]});
    } else {
      w.scale = Tensor(t.data, t.dtype, {s[0], s[1]});
    }
  }

  std::shared_ptr<Checkpoint> ck_;
};

// splitmix64: a tiny, fast, well-mixed generator; each 65536-element block is seeded from
// (seed, tensor index, block index) so the values do not depend on the thread count.
inline uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline float uniform01(uint64_t& s) {
  return static_cast<float>(splitmix(s) >> 40) * 0x1.0p-24f;
}

// Fills `len` elements of a dummy matrix from generator state s. One 64-bit draw gives eight
// fp8 codes with exponent fields below 8 (|x| < 2 before the per-block scale of amp, never
// NaN: a code with bit 6 set loses bits 6 and 3) or four 16-bit uniforms for values in
// [-amp√3, amp√3) (bf16 keeps 8 bits of them). Two draws per fp8 byte before: 1.33 ns a byte
// on one core, 0.15 now.
void fill_block(DType dtype, char* dst, int64_t len, float amp, uint64_t& s) {
  if (dtype == DType::f8_e4m3) {
    for (int64_t i = 0; i < len; i += 8) {
      uint64_t w = splitmix(s);
      const uint64_t big = w & 0x4040404040404040ull;
      w &= ~(big | (big >> 3));
      std::memcpy(dst + i, &w, static_cast<size_t>(std::min<int64_t>(8, len - i)));
    }
    return;
  }
  const float scale = amp * 1.7320508f;
  auto each = [&](auto* out, auto convert) {
    for (int64_t i = 0; i < len; i += 4) {
      const uint64_t w = splitmix(s);
      for (int64_t j = 0; j < 4 && i + j < len; ++j) {
        const float u = static_cast<float>((w >> (16 * j)) & 0xffff) * 0x1.0p-16f;
        out[i + j] = convert((u * 2.0f - 1.0f) * scale);
      }
    }
  };
  if (dtype == DType::f32) return each(reinterpret_cast<float*>(dst), [](float v) { return v; });
  if (dtype == DType::bf16) return each(reinterpret_cast<uint16_t*>(dst), f32_to_bf16);
  each(reinterpret_cast<uint16_t*>(dst), f32_to_f16);
}

// Fills n elements at dst from the blocks of generator stream `seed` (thread-count independent).
void fill_random(DType dtype, char* dst, int64_t n, float amp, uint64_t seed) {
  constexpr int64_t kBlock = 1 << 16;  // elements, a multiple of 8
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  default_thread_pool().parallel_for((n + kBlock - 1) / kBlock, [&](int64_t b) {
    uint64_t s = seed * 0x100000001b3ull + static_cast<uint64_t>(b);
    const int64_t i0 = b * kBlock;
    fill_block(dtype, dst + i0 * esize, std::min(n, i0 + kBlock) - i0, amp, s);
  });
}

class DummySource final : public WeightSource {
 public:
  DummySource(DType dtype, uint64_t seed, bool with_mtp, bool pooled)
      : dtype_(dtype), seed_(seed), with_mtp_(with_mtp), pooled_(pooled) {
    if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16 &&
        dtype != DType::f8_e4m3) {
      throw Error(ErrorKind::invalid_argument,
                  std::string("dummy weights cannot be ") + dtype_name(dtype));
    }
  }

  bool has(const std::string& name) const override { return with_mtp_ && name == "mtp.fc.weight"; }

  Weight matrix(const std::string&, int64_t rows, int64_t cols) override {
    return stacked_impl(1, rows, cols)[0];
  }
  std::vector<Weight> stacked(const std::string&, int64_t count, int64_t rows,
                              int64_t cols) override {
    return stacked_impl(count, rows, cols);
  }

  Tensor vector_f32(const std::string&, int64_t numel, Fill fill) override {
    auto buf = new_buffer(numel * sizeof(float));
    float* p = static_cast<float*>(buf->data());
    uint64_t s = seed_ * 7919 + (counter_++);
    for (int64_t i = 0; i < numel; ++i) {
      switch (fill) {
        case Fill::ones:
          p[i] = 1.0f;
          break;
        case Fill::zeros:
          p[i] = 0.0f;
          break;
        case Fill::random:
          p[i] = (uniform01(s) - 0.5f) * 0.2f;
          break;
        case Fill::log_uniform_1_16:
          p[i] = std::log(1.0f + 15.0f * uniform01(s));
          break;
      }
    }
    owned.push_back(buf);
    return Tensor(p, DType::f32, {numel});
  }

 private:
  std::vector<Weight> stacked_impl(int64_t count, int64_t rows, int64_t cols) {
    const int64_t n = count * rows * cols;
    const size_t each = static_cast<size_t>(rows * cols) * dtype_size(dtype_);  // bytes a matrix
    const uint64_t tensor_seed = seed_ * 1000003 + (counter_++);
    const float amp = 0.1f / std::sqrt(static_cast<float>(cols));  // keeps activations tame
    char* base = nullptr;
    if (pooled_) {
      base = pooled_view(cols, count, each, amp);
    } else {
      auto buf = new_buffer(static_cast<size_t>(count) * each);
      base = static_cast<char*>(buf->data());
      fill_random(dtype_, base, n, amp, tensor_seed);
      owned.push_back(buf);
    }
    std::vector<Weight> out(count);
    for (int64_t e = 0; e < count; ++e) {
      out[e].w = Tensor(base + e * each, dtype_, {rows, cols});
      if (dtype_ == DType::f8_e4m3) {
        const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
        auto sb = new_buffer(static_cast<size_t>(sr * sc) * sizeof(float));
        float* sp = static_cast<float*>(sb->data());
        for (int64_t i = 0; i < sr * sc; ++i) sp[i] = amp;
        owned.push_back(sb);
        out[e].scale = Tensor(sp, DType::f32, {sr, sc});
        out[e].block_rows = 128;
        out[e].block_cols = 128;
      }
      matrix_bytes += out[e].nbytes();
    }
    return out;
  }

  // Pooled: `count` matrices of `each` bytes, one after another, in a pool of random values
  // for matrices of `cols` columns (their values scale with 1 / sqrt(cols)), at an offset where
  // none of them has the address and size of an earlier view (move_weights gives views of
  // equal address and size one device copy; a later stack's matrix e can land on an earlier
  // one's f when their offsets differ by a multiple of `each`). A request larger than the
  // pool, or one past its offsets, starts a new one; the earlier views keep theirs.
  char* pooled_view(int64_t cols, int64_t count, size_t each, float amp) {
    constexpr size_t kStep = 64, kOffsets = 1 << 16;  // 4 MiB of offsets
    const size_t bytes = static_cast<size_t>(count) * each;
    Pool& p = pools_[cols];
    for (;;) {
      if (p.bytes < bytes + kStep * kOffsets || p.views == kOffsets) {
        const size_t esize = dtype_size(dtype_);
        const size_t nb = (bytes + kStep * kOffsets + esize - 1) / esize * esize;
        char* data = nullptr;
        std::shared_ptr<void> mem;
        if (void* pinned = allocate_pinned(nb)) {  // page-locked: a faster copy to the device
          data = static_cast<char*>(pinned);
          mem = std::shared_ptr<void>(pinned, [nb](void* q) { release_pinned(q, nb); });
        } else {
          auto buf = new_buffer(nb);
          data = static_cast<char*>(buf->data());
          mem = std::move(buf);
        }
        fill_random(dtype_, data, static_cast<int64_t>(nb / esize), amp, seed_ * 7 + pools_made_++);
        owned.push_back(std::move(mem));
        p = Pool{data, nb, 0};
      }
      char* base = p.data + kStep * p.views++;
      bool clash = false;
      for (int64_t e = 0; e < count && !clash; ++e)
        clash = issued_.count({base + e * each, each}) > 0;
      if (clash) continue;
      for (int64_t e = 0; e < count; ++e) issued_.insert({base + e * each, each});
      return base;
    }
  }

  struct Pool {
    char* data = nullptr;
    size_t bytes = 0;
    size_t views = 0;
  };
  DType dtype_;
  uint64_t seed_;
  bool with_mtp_;
  bool pooled_;
  uint64_t counter_ = 0;
  std::map<int64_t, Pool> pools_;                    // pooled: by the matrices' column count
  std::set<std::pair<const char*, size_t>> issued_;  // pooled: every view's (address, bytes)
  uint64_t pools_made_ = 0;
};

}  // namespace

std::unique_ptr<WeightSource> make_checkpoint_source(std::shared_ptr<Checkpoint> checkpoint) {
  return std::make_unique<CheckpointSource>(std::move(checkpoint));
}

std::unique_ptr<WeightSource> make_dummy_source(DType dtype, uint64_t seed, bool with_mtp,
                                                bool pooled) {
  return std::make_unique<DummySource>(dtype, seed, with_mtp, pooled);
}

}  // namespace hibana
