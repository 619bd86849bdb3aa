// A test fixture with the CUDA and CPU backends (skipped without a GPU) and device copies of
// host data that live as long as the test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"

namespace hibana::test {

class CudaFixture : public testing::Test {
 public:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
    gpu = make_cuda_backend();
    cpu = make_cpu_backend();
  }
  // A device copy of host bytes, kept alive by the fixture.
  Tensor upload(const void* data, DType dtype, std::initializer_list<int64_t> dims) {
    Tensor shape(nullptr, dtype, dims, Device::cuda);
    keep.push_back(std::make_unique<Buffer>(std::max<size_t>(shape.nbytes(), 4), Device::cuda));
    shape.data = keep.back()->data();
    copy_from_host(data, shape);
    return shape;
  }
  static std::vector<float> download(const Tensor& t) {
    std::vector<float> v(t.numel());
    copy_to_host(t, v.data());
    return v;
  }
  // A 1-D i32 tensor of v: a device copy kept by the fixture, or (device false, for the CPU
  // backend) v itself in place.
  Tensor ints(const std::vector<int32_t>& v, bool device) {
    const int64_t n = static_cast<int64_t>(v.size());
    return device ? upload(v.data(), DType::i32, {n})
                  : Tensor(const_cast<int32_t*>(v.data()), DType::i32, {n});
  }
  // The layout of a pass's T tokens for the recurrent ops: sequences [seq_start[s],
  // seq_start[s + 1]) with their state slots and each token's snapshot slot (device copies, or
  // for the CPU backend views of the vectors).
  BatchLayout recurrent_layout(int64_t T, const std::vector<int32_t>& seq_start,
                               const std::vector<int32_t>& slots, const std::vector<int32_t>& snaps,
                               bool device) {
    BatchLayout l;
    l.num_tokens = T;
    l.num_seqs = static_cast<int64_t>(seq_start.size()) - 1;
    l.seq_start = ints(seq_start, device);
    l.state_slot = ints(slots, device);
    l.snapshot_slot = ints(snaps, device);
    return l;
  }
  // A zeroed [rows, cols] f32 device tensor, kept alive by the fixture; or every value v (a
  // sentinel an op must overwrite).
  Tensor device_f32(int64_t rows, int64_t cols, float v = 0.0f) {
    std::vector<float> values(rows * cols, v);
    return upload(values.data(), DType::f32, {rows, cols});
  }
  // x ([rows, cols], row-major) on the device inside a buffer `pad` columns wider whose extra
  // columns are NaN (as a graph's reused memory may hold): a view of the first cols columns.
  Tensor upload_fenced(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t pad = 8) {
    std::vector<float> padded(rows * (cols + pad), std::nanf(""));
    for (int64_t r = 0; r < rows; ++r)
      std::copy(x.begin() + r * cols, x.begin() + (r + 1) * cols,
                padded.begin() + r * (cols + pad));
    Tensor t = upload(padded.data(), DType::f32, {rows, cols + pad});
    t.shape[1] = cols;
    return t;
  }
  // Columns [0, width) of a row-major f32 tensor: a view with the wider row pitch.
  static Tensor first_columns(const Tensor& t, int64_t width) {
    Tensor v = t;
    v.shape[1] = width;
    return v;
  }
  // The largest |a[i] - b[i]|; infinity where one side is NaN and the other is not (a NaN
  // difference would otherwise be lost to std::max).
  static float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float worst = 0.0f;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
      if (!std::isnan(a[i])) worst = std::max(worst, std::fabs(a[i] - b[i]));
    }
    return worst;
  }

  std::unique_ptr<Backend> gpu, cpu;
  std::vector<std::unique_ptr<Buffer>> keep;
};

}  // namespace hibana::test
