#include "io/checkpoint.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "io/hub.h"

namespace hibana {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string resolve_model_dir(const std::string& model) {
  std::error_code ec;
  if (fs::is_directory(model, ec)) return model;
  if (fs::exists(model, ec)) {
    throw Error(ErrorKind::invalid_argument, model + ": is a file; give the model's directory");
  }
  // ORG/NAME[@REVISION] in the hub cache.
  const auto [repo, revision] = parse_hub_ref(model);
  size_t slash = repo.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == repo.size() ||
      repo.find('/', slash + 1) != std::string::npos || model.front() == '.' ||
      model.front() == '/') {
    throw Error(ErrorKind::not_found,
                model + ": no such directory (and not an ORG/NAME of the Hugging Face hub)");
  }
  const std::string folder = hub_repo_folder(repo);
  std::vector<std::string> looked;
  for (const std::string& root : hub_cache_roots()) {
    fs::path base = fs::path(root) / folder;
    looked.push_back(base.string());
    if (!fs::is_directory(base, ec)) continue;
    if (std::string snap = hub_snapshot_dir(base.string(), revision); !snap.empty()) return snap;
    throw Error(ErrorKind::not_found, model + ": found " + base.string() +
                                          " in the hub cache but no snapshot for revision '" +
                                          revision + "'");
  }
  std::string where;
  for (auto& l : looked) where += "\n  " + l;
  throw Error(ErrorKind::not_found, model +
                                        ": no such directory, and not in the Hugging Face hub "
                                        "cache (looked in:" +
                                        where + "); download it with `hibana pull " + model + "`");
}

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  fs::path d(dir);
  config_text_ = read_text_file((d / "config.json").string());
  std::error_code ec;
  if (fs::exists(d / "generation_config.json", ec)) {
    generation_text_ = read_text_file((d / "generation_config.json").string());
  }

  std::vector<std::string> shard_names;
  fs::path index = d / "model.safetensors.index.json";
  std::map<std::string, std::string> index_map;  // tensor -> shard file name
  if (fs::exists(index, ec)) {
    json j;
    try {
      j = json::parse(read_text_file(index.string()));
    } catch (const json::exception& e) {
      throw Error(ErrorKind::corrupt_data, index.string() + ": not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw Error(ErrorKind::corrupt_data, index.string() + ": has no weight_map object");
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        throw Error(ErrorKind::corrupt_data,
                    index.string() + ": weight_map entry '" + it.key() + "' is not a file name");
      }
      std::string file = it.value().get<std::string>();
      if (file.find('/') != std::string::npos || file.find("..") != std::string::npos) {
        throw Error(ErrorKind::corrupt_data,
                    index.string() + ": shard name '" + file + "' points outside the directory");
      }
      index_map[it.key()] = file;
      if (std::find(shard_names.begin(), shard_names.end(), file) == shard_names.end()) {
        shard_names.push_back(file);
      }
    }
  } else if (fs::exists(d / "model.safetensors", ec)) {
    shard_names.push_back("model.safetensors");
  } else {
    for (auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().extension() == ".safetensors") shard_names.push_back(e.path().filename());
    }
    std::sort(shard_names.begin(), shard_names.end());
  }
  if (shard_names.empty()) {
    throw Error(ErrorKind::not_found, dir + ": no model.safetensors, index or *.safetensors files");
  }

  for (const std::string& name : shard_names) {
    fs::path p = d / name;
    if (!fs::exists(p, ec)) {
      // In a hub cache snapshot a missing shard is most likely a pull that did not finish.
      fs::path n = d.lexically_normal();
      if (n.filename().empty()) n = n.parent_path();  // "DIR/"
      const bool snapshot = n.parent_path().filename() == "snapshots";
      throw Error(ErrorKind::not_found,
                  p.string() + ": shard listed in " +
                      (index_map.empty() ? std::string("the directory") : index.string()) +
                      " is missing" +
                      (snapshot ? " (an unfinished download? `hibana pull ORG/NAME` resumes it)"
                                : ""));
    }
    files_.push_back(std::make_unique<SafetensorsFile>(p.string()));
    size_t fi = files_.size() - 1;
    for (const auto& [tname, info] : files_.back()->tensors()) {
      auto [it, inserted] = where_.emplace(tname, fi);
      if (!inserted) {
        throw Error(ErrorKind::corrupt_data, "tensor '" + tname + "' appears in both " +
                                                 files_[it->second]->path() + " and " + p.string());
      }
    }
  }
  for (const auto& [tname, file] : index_map) {
    auto it = where_.find(tname);
    if (it == where_.end() || fs::path(files_[it->second]->path()).filename() != file) {
      throw Error(ErrorKind::corrupt_data, index.string() + " says tensor '" + tname + "' is in " +
                                               file + " but it is not there");
    }
  }
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    throw Error(ErrorKind::not_found, dir_ + ": the checkpoint has no tensor '" + name + "'");
  }
  return files_[it->second]->info(name);
}

Tensor Checkpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    throw Error(ErrorKind::not_found, dir_ + ": the checkpoint has no tensor '" + name + "'");
  }
  return files_[it->second]->tensor(name);
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  for (auto& [n, f] : where_) names.push_back(n);
  return names;
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (auto& f : files_) {
    for (auto& [n, t] : f->tensors()) total += t.nbytes;
  }
  return total;
}

}  // namespace hibana
