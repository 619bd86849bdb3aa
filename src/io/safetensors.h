// safetensors files, memory-mapped and validated: every tensor view handed out lies inside
// the mapping and matches its declared dtype and shape.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/mapped_file.h"

namespace hibana {

struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  size_t offset = 0;  // from the start of the file
  size_t nbytes = 0;
};

class SafetensorsFile {
 public:
  // Throws Error naming the file and the problem: missing file, truncated file, bad header,
  // unknown dtype, offsets outside the data or inconsistent with the shape, overlapping tensors.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // a view into the mapping

 private:
  MappedFile file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Parses a safetensors header held in memory (the whole file image). Used by SafetensorsFile
// and directly by the fuzzer; `what` names the source in error messages.
std::map<std::string, TensorInfo> parse_safetensors(const uint8_t* data, size_t size,
                                                    const std::string& what,
                                                    std::map<std::string, std::string>* metadata);

// Writes tensors to a safetensors file (used by tests and tools that produce checkpoints).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace hibana
