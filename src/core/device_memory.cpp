#include "core/device_memory.h"

#include <cstring>

#include "core/error.h"

namespace hibana {

namespace {
DeviceMemory* g_cuda = nullptr;
}

void register_device_memory(Device device, DeviceMemory* memory) {
  check(device == Device::cuda, ErrorKind::internal, "only CUDA memory can be registered");
  g_cuda = memory;
}

DeviceMemory& device_memory(Device device) {
  if (device != Device::cuda || !g_cuda) {
    throw Error(ErrorKind::unsupported, "no backend manages this device's memory");
  }
  return *g_cuda;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
  device_memory(dst_device == Device::cpu ? src_device : dst_device).copy(dst, src, bytes);
}

void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device,
                      size_t bytes) {
  if (dst_device == Device::cpu) return copy_bytes(dst, dst_device, src, src_device, bytes);
  if (bytes) device_memory(dst_device).copy_async(dst, src, bytes);
}

void copy_batch(Device device, const std::vector<ByteCopy>& copies, bool to_host) {
  if (device == Device::cpu) {
    for (const ByteCopy& c : copies) {
      if (c.bytes) std::memcpy(c.dst, c.src, c.bytes);
    }
    return;
  }
  device_memory(device).copy_batch(copies, to_host);
}

void zero_bytes(void* p, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::cpu) {
    std::memset(p, 0, bytes);
  } else {
    device_memory(device).zero(p, bytes);
  }
}

void copy_to_host(const Tensor& src, void* dst) {
  check(src.is_contiguous(), ErrorKind::internal, "copy_to_host of a strided tensor");
  copy_bytes(dst, Device::cpu, src.data, src.device, src.nbytes());
}

void copy_from_host(const void* src, const Tensor& dst) {
  check(dst.is_contiguous(), ErrorKind::internal, "copy_from_host into a strided tensor");
  copy_bytes(dst.data, dst.device, src, Device::cpu, dst.nbytes());
}

void* allocate_pinned(size_t bytes) {
  return g_cuda && bytes ? g_cuda->allocate_pinned(bytes) : nullptr;
}

void release_pinned(void* p, size_t bytes) {
  if (p) g_cuda->release_pinned(p, bytes);
}

}  // namespace hibana
