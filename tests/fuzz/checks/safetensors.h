// safetensors_fuzz: parse_safetensors on an arbitrary file image. It may throw hibana::Error;
// whatever it returns must be safe to map: every tensor's [offset, offset + nbytes) lies in the
// data section of the image, its shape has no negative dimension and nbytes is exactly
// numel * dtype_size, and no two tensors with data overlap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "fuzz/checks/check.h"
#include "io/safetensors.h"

namespace hibana::fuzz {

inline void check_safetensors(std::string_view image) {
  const auto* data = reinterpret_cast<const uint8_t*>(image.data());
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  try {
    tensors = parse_safetensors(data, image.size(), "fuzz", &metadata);
  } catch (const Error&) {
    return;
  }
  FUZZ_REQUIRE(image.size() >= 8, "parsed an image without a header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  FUZZ_REQUIRE(header_len <= image.size() - 8, "parsed a truncated header");
  const uint64_t data_start = 8 + header_len;

  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, t] : tensors) {
    FUZZ_REQUIRE(name == t.name, "tensor listed under another name: " + name);
    FUZZ_REQUIRE(t.offset >= data_start, "tensor '" + name + "' starts inside the header");
    FUZZ_REQUIRE(t.offset <= image.size() && t.nbytes <= image.size() - t.offset,
                 "tensor '" + name + "' runs past the end of the image");
    unsigned __int128 numel = 1;
    for (int64_t d : t.shape) {
      FUZZ_REQUIRE(d >= 0, "tensor '" + name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    FUZZ_REQUIRE(numel * dtype_size(t.dtype) == t.nbytes,
                 "tensor '" + name + "' has nbytes != numel * dtype_size");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->nbytes == 0) continue;
    FUZZ_REQUIRE(!previous || previous->offset + previous->nbytes <= t->offset,
                 "tensors '" + previous->name + "' and '" + t->name + "' overlap");
    previous = t;
  }
}

}  // namespace hibana::fuzz
