// A Hugging Face model directory: config.json, optional generation_config.json and the
// weights in one or several safetensors files (sharded through model.safetensors.index.json).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace hibana {

// Turns the user's model argument into a directory: an existing directory is used as is;
// "ORG/NAME" (optionally "ORG/NAME@REVISION") is looked up in the Hugging Face hub cache
// ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub). Throws not_found with
// every place it looked.
std::string resolve_model_dir(const std::string& model);

class Checkpoint {
 public:
  // Opens dir/config.json and every weight file. Throws Error naming the file and problem.
  explicit Checkpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& config_text() const { return config_text_; }
  const std::optional<std::string>& generation_config_text() const { return generation_text_; }

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;  // throws not_found naming the tensor
  std::vector<std::string> tensor_names() const;
  size_t total_bytes() const;

 private:
  std::string dir_;
  std::string config_text_;
  std::optional<std::string> generation_text_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace hibana
