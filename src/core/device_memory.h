// Memory of devices other than the CPU. core/ knows no device API: a backend that owns a device
// registers how to allocate, free, copy and clear its memory, and Buffer, make_tensor and the
// state tiers go through these functions. Copies between two CPU pointers are plain memcpy.
#pragma once

#include <cstddef>
#include <vector>

#include "core/tensor.h"

namespace hibana {

// One copy of a batch: `bytes` bytes from src to dst.
struct ByteCopy {
  void* dst;
  const void* src;
  size_t bytes;
};

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
  // A copy into this device's memory (from it or from host memory) queued behind the device's
  // work, returning at once where the device can: the caller keeps `src` unchanged until a
  // later call that waits for the device. The default is copy().
  virtual void copy_async(void* dst, const void* src, size_t bytes) { copy(dst, src, bytes); }
  // Copies between this device's memory and host memory, all in one direction (to_host: every
  // src is device memory and every dst host memory; else the reverse), returning once all are
  // done and ordered after the device's queued work (and before work queued later). The
  // default copies them one by one.
  virtual void copy_batch(const std::vector<ByteCopy>& copies, bool to_host) {
    for (const ByteCopy& c : copies) copy(c.dst, c.src, c.bytes);
    (void)to_host;
  }
  // Page-locked host memory this device copies to and from directly, or nullptr when it has
  // none to give (the caller then uses ordinary memory); and its release.
  virtual void* allocate_pinned(size_t /*bytes*/) { return nullptr; }
  virtual void release_pinned(void* /*p*/, size_t /*bytes*/) {}
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
// The same, without waiting where dst is a device's memory (DeviceMemory::copy_async: `src`
// stays unchanged until a later call waits for the device); a host destination waits as
// copy_bytes does.
void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device,
                      size_t bytes);
// A batch of copies between memory of `device` and host memory, in one direction (see
// DeviceMemory::copy_batch); plain memcpy on the CPU.
void copy_batch(Device device, const std::vector<ByteCopy>& copies, bool to_host);
void zero_bytes(void* p, Device device, size_t bytes);
// Page-locked host memory from the GPU backend, when one is registered and can give it; else
// nullptr. Released with release_pinned.
void* allocate_pinned(size_t bytes);
void release_pinned(void* p, size_t bytes);
// Copies a tensor's bytes (contiguous) to or from host memory.
void copy_to_host(const Tensor& src, void* dst);
void copy_from_host(const void* src, const Tensor& dst);

}  // namespace hibana
