// Tensor: a non-owning view (dtype, shape, strides, device pointer).
// Buffer: owns memory on a device. Views never outlive the Buffer or mapping they point into.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace hibana {

enum class Device : uint8_t { cpu, cuda };

constexpr int kMaxDims = 4;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements

  Tensor() = default;
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> dims, Device device = Device::cpu);
  static Tensor from_shape(void* data, DType dtype, const int64_t* dims, int ndim,
                           Device device = Device::cpu);

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape[i < 0 ? i + ndim : i]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  std::string shape_string() const;  // "[4, 128]"

  // Rows [begin, end) of dimension 0.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Same data seen with another shape (must be contiguous and hold the same count).
  Tensor reshape(std::initializer_list<int64_t> dims) const;

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  template <typename T>
  T* row(int64_t i) const {
    return reinterpret_cast<T*>(static_cast<char*>(data) +
                                i * stride[0] * static_cast<int64_t>(dtype_size(dtype)));
  }
};

// Memory owned on one device. CPU buffers are 64-byte aligned.
class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, Device device = Device::cpu);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  Device device() const { return device_; }
  Tensor view(DType dtype, std::initializer_list<int64_t> dims) const;

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu;
};

// A Buffer together with a full-size view of it, for tensors the program creates itself.
struct OwnedTensor {
  Buffer buffer;
  Tensor tensor;
};
// Zero-filled.
OwnedTensor make_tensor(DType dtype, std::initializer_list<int64_t> dims,
                        Device device = Device::cpu);
// Uninitialised: for outputs an op writes in full (saves a fill per activation on a GPU).
OwnedTensor make_uninit_tensor(DType dtype, std::initializer_list<int64_t> dims,
                               Device device = Device::cpu);

}  // namespace hibana
