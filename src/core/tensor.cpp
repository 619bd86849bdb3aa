#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/device_memory.h"
#include "core/error.h"

namespace hibana {

namespace {
void set_contiguous_strides(Tensor& t) {
  int64_t s = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.stride[i] = s;
    s *= t.shape[i];
  }
}
}  // namespace

Tensor::Tensor(void* data_, DType dtype_, std::initializer_list<int64_t> dims, Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  check(dims.size() <= kMaxDims, ErrorKind::internal, "tensor with too many dimensions");
  ndim = static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) shape[i++] = d;
  set_contiguous_strides(*this);
}

Tensor Tensor::from_shape(void* data, DType dtype, const int64_t* dims, int ndim, Device device) {
  check(ndim >= 0 && ndim <= kMaxDims, ErrorKind::internal, "tensor with too many dimensions");
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.ndim = ndim;
  for (int i = 0; i < ndim; ++i) t.shape[i] = dims[i];
  set_contiguous_strides(t);
  return t;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  check(ndim >= 1 && begin >= 0 && begin <= end && end <= shape[0], ErrorKind::internal,
        "slice_rows out of range");
  Tensor t = *this;
  t.data = static_cast<char*>(data) + begin * stride[0] * static_cast<int64_t>(dtype_size(dtype));
  t.shape[0] = end - begin;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> dims) const {
  check(is_contiguous(), ErrorKind::internal, "reshape of a non-contiguous tensor");
  Tensor t(data, dtype, dims, device);
  check(t.numel() == numel(), ErrorKind::internal,
        "reshape " + shape_string() + " -> " + t.shape_string() + " changes the element count");
  return t;
}

Buffer::Buffer(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device != Device::cpu) {
    data_ = device_memory(device).allocate(bytes);
    return;
  }
  size_t rounded = (bytes + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded);
  if (!data_) {
    throw Error(ErrorKind::out_of_memory,
                "could not allocate " + std::to_string(bytes) + " bytes of host memory");
  }
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), device_(other.device_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() {
  if (data_ && device_ == Device::cpu) std::free(data_);
  if (data_ && device_ != Device::cpu) device_memory(device_).release(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

Tensor Buffer::view(DType dtype, std::initializer_list<int64_t> dims) const {
  Tensor t(data_, dtype, dims, device_);
  check(t.nbytes() <= bytes_, ErrorKind::internal,
        "view " + t.shape_string() + " is larger than its buffer");
  return t;
}

OwnedTensor make_uninit_tensor(DType dtype, std::initializer_list<int64_t> dims, Device device) {
  Tensor shape_only(nullptr, dtype, dims, device);
  OwnedTensor out;
  out.buffer = Buffer(shape_only.nbytes(), device);
  out.tensor = shape_only;
  out.tensor.data = out.buffer.data();
  return out;
}

OwnedTensor make_tensor(DType dtype, std::initializer_list<int64_t> dims, Device device) {
  OwnedTensor out = make_uninit_tensor(dtype, dims, device);
  if (out.buffer.data()) zero_bytes(out.buffer.data(), device, out.tensor.nbytes());
  return out;
}

}  // namespace hibana
