// Memory of devices other than the CPU. core/ knows no device API: a backend that owns a device
// registers how to allocate, free, copy and clear its memory, and Buffer, make_tensor and the
// state tiers go through these functions. Copies between two CPU pointers are plain memcpy.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace hibana {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // Throws Error(out_of_memory) when the device is full.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;
  // Copies between any two pointers of this device or the host (the device resolves which is
  // which). Returns once `dst` holds the bytes when dst is host memory; device-side copies are
  // ordered with the device's work.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  // Waits until all queued device work has finished.
  virtual void synchronize() = 0;
};

// Registers the memory functions of `device` (called once by the backend that owns it; the
// object must live for the rest of the program).
void register_device_memory(Device device, DeviceMemory* memory);
// The registered functions; throws Error(unsupported) when no backend registered the device.
DeviceMemory& device_memory(Device device);

// dst <- src for `bytes` bytes, whichever devices the two live on.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
void zero_bytes(void* p, Device device, size_t bytes);
// Copies a tensor's bytes (contiguous) to or from host memory.
void copy_to_host(const Tensor& src, void* dst);
void copy_from_host(const void* src, const Tensor& dst);

}  // namespace hibana
