#include "support/fixture_model.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/mapped_file.h"
#include "support/paths.h"

namespace hibana::test {

std::vector<std::string> fixture_model_names() {
  std::vector<std::string> names;
  for (auto& e : std::filesystem::directory_iterator(fixtures_dir() + "/models")) {
    if (std::filesystem::exists(e.path() / "reference.json")) names.push_back(e.path().filename());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string fixture_model_dir(const std::string& name) { return fixtures_dir() + "/models/" + name; }

std::vector<ReferencePrompt> load_reference(const std::string& name) {
  auto j = nlohmann::json::parse(read_text_file(fixture_model_dir(name) + "/reference.json"));
  std::vector<ReferencePrompt> out;
  for (const auto& p : j["prompts"]) {
    ReferencePrompt r;
    r.ids = p["ids"].get<std::vector<int32_t>>();
    r.argmax = p["argmax"].get<std::vector<int32_t>>();
    r.last_logits = p["last_logits"].get<std::vector<float>>();
    r.greedy = p["greedy"].get<std::vector<int32_t>>();
    if (p.contains("mtp_argmax")) {
      r.mtp_argmax = p["mtp_argmax"].get<std::vector<int32_t>>();
      r.mtp_last_logits = p["mtp_last_logits"].get<std::vector<float>>();
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::unique_ptr<Model> load_fixture_model(const std::string& name, const std::string& device) {
  const std::string dir = fixture_model_dir(name);
  if (!std::filesystem::exists(dir + "/model.safetensors") &&
      !std::filesystem::exists(dir + "/model.safetensors.index.json")) {
    return Model::dummy(dir + "/config.json", DType::bf16, make_backend(device));  // shapes only
  }
  return Model::load(dir, make_backend(device));
}

std::vector<std::string> test_devices() { return {"cpu", "cuda"}; }

bool unavailable(const std::string& device) {
  if (device == "cuda" && !cuda_available()) {
    std::fprintf(stderr, "no CUDA GPU here: skipping the CUDA case\n");
    return true;
  }
  return false;
}

}  // namespace hibana::test
