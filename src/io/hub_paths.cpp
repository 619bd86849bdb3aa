#include "io/hub.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace hibana {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// A small file's text, surrounding whitespace dropped (empty if it cannot be read).
std::string read_trimmed(const std::string& path) {
  std::ifstream in(path);
  return trim(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
}

std::string hf_home() {
  if (std::string h = env("HF_HOME"); !h.empty()) return h;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x + "/huggingface";
  return env("HOME") + "/.cache/huggingface";
}

}  // namespace

std::string hub_cache_dir() {
  if (std::string c = env("HF_HUB_CACHE"); !c.empty()) return c;
  if (std::string c = env("HUGGINGFACE_HUB_CACHE"); !c.empty()) return c;
  return hf_home() + "/hub";
}

std::vector<std::string> hub_cache_roots() {
  std::vector<std::string> roots = {hub_cache_dir()};
  auto add = [&roots](const std::string& r) {
    if (std::find(roots.begin(), roots.end(), r) == roots.end()) roots.push_back(r);
  };
  if (std::string h = env("HF_HOME"); !h.empty()) add(h + "/hub");
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) add(x + "/huggingface/hub");
  if (std::string home = env("HOME"); !home.empty()) add(home + "/.cache/huggingface/hub");
  return roots;
}

std::string hub_endpoint() {
  std::string e = env("HF_ENDPOINT");
  if (e.empty()) e = "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string hub_token() {
  for (const char* name : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    if (std::string t = trim(env(name)); !t.empty()) return t;
  }
  std::string path = env("HF_TOKEN_PATH");
  if (path.empty()) path = hf_home() + "/token";
  return read_trimmed(path);
}

std::string hub_repo_folder(const std::string& repo) {
  const size_t slash = repo.find('/');
  return "models--" + repo.substr(0, slash) + "--" + repo.substr(slash + 1);
}

std::string hub_read_ref(const std::string& ref_file) {
  return read_trimmed(ref_file);
}

HubRef parse_hub_ref(const std::string& model) {
  const size_t at = model.find('@');
  if (at == std::string::npos) return {model};
  return {model.substr(0, at), model.substr(at + 1)};
}

std::string hub_snapshot_dir(const std::string& repo_dir, const std::string& revision) {
  std::error_code ec;
  const fs::path base(repo_dir);
  std::string commit = revision;
  if (const fs::path ref = base / "refs" / revision; fs::is_regular_file(ref, ec)) {
    commit = hub_read_ref(ref.string());
  }
  if (!commit.empty() && fs::is_directory(base / "snapshots" / commit, ec)) {
    return (base / "snapshots" / commit).string();
  }
  if (revision != "main") return "";
  std::vector<fs::path> snaps;
  for (const auto& e : fs::directory_iterator(base / "snapshots", ec)) {
    if (e.is_directory(ec)) snaps.push_back(e.path());
  }
  return snaps.size() == 1 ? snaps[0].string() : "";
}

bool hub_default_file(const std::string& path) {
  if (path.find('/') != std::string::npos) return false;  // top level only
  for (const char* glob :
       {"*.json", "*.safetensors", "*.jinja", "*.txt", "tokenizer.model", "*.tiktoken"}) {
    if (::fnmatch(glob, path.c_str(), 0) == 0) return true;
  }
  return false;
}

std::vector<HubCachedModel> hub_cached_models() {
  std::vector<HubCachedModel> out;
  std::error_code ec;
  for (const std::string& root : hub_cache_roots()) {
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      const size_t sep = name.find("--", 8);
      if (name.rfind("models--", 0) != 0 || sep == std::string::npos || !e.is_directory(ec)) {
        continue;
      }
      HubCachedModel m;
      m.repo = name.substr(8, sep - 8) + "/" + name.substr(sep + 2);
      if (std::any_of(out.begin(), out.end(), [&](const auto& o) { return o.repo == m.repo; })) {
        continue;  // an earlier root has it: that is the copy --model finds
      }
      m.dir = e.path().string();
      for (const auto& b : fs::directory_iterator(e.path() / "blobs", ec)) {
        if (!b.is_regular_file(ec)) continue;  // (a pull beside this may rename it meanwhile)
        const auto n = b.file_size(ec);
        if (!ec) m.bytes += n;
        m.partial = m.partial || b.path().extension() == ".incomplete";
      }
      for (const auto& r : fs::recursive_directory_iterator(e.path() / "refs", ec)) {
        if (!r.is_regular_file(ec)) continue;
        m.refs.push_back(r.path().lexically_relative(e.path() / "refs").string());
      }
      std::sort(m.refs.begin(), m.refs.end());
      const std::string snap = hub_snapshot_dir(m.dir, "main");
      if (!snap.empty()) m.snapshot = fs::path(snap).filename().string();
      out.push_back(std::move(m));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.repo < b.repo; });
  return out;
}

}  // namespace hibana
