#include "io/hub.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "core/byte_text.h"
#include "core/error.h"
#include "core/log.h"
#include "io/digest.h"
#include "io/http_client.h"
#include "io/mapped_file.h"

namespace hibana {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool is_hex(const std::string& s, size_t min_len, size_t max_len) {
  return s.size() >= min_len && s.size() <= max_len &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c); });
}

// ORG/NAME with the hub's characters only (it becomes a folder name and part of URLs).
void check_repo_name(const std::string& repo) {
  const size_t slash = repo.find('/');
  bool ok = slash != std::string::npos && slash > 0 && slash + 1 < repo.size() &&
            repo.find('/', slash + 1) == std::string::npos && repo.find("..") == std::string::npos;
  for (unsigned char c : repo) {
    ok = ok && (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '/');
  }
  check(ok, ErrorKind::invalid_argument,
        "'" + repo + "' is not a Hugging Face model id (ORG/NAME, e.g. Qwen/Qwen3-8B)");
}

// A file path from the hub's listing, safe to create under the snapshot folder.
bool safe_repo_path(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.find('\0') != std::string::npos) return false;
  for (const auto& part : fs::path(p)) {
    if (part == ".." || part == ".") return false;
  }
  return true;
}

// The message for a hub answer that is not a success, from its status and X-Error-Code.
[[noreturn]] void throw_hub_error(const HttpResult& r, const std::string& what,
                                  const std::string& repo, bool has_token) {
  auto header = [&](const char* k) {
    auto it = r.headers.find(k);
    return it == r.headers.end() ? std::string() : it->second;
  };
  const std::string code = header("x-error-code");
  std::string detail = header("x-error-message");
  if (detail.empty()) {
    try {
      json j = json::parse(r.body);
      if (j.is_object() && j.contains("error") && j["error"].is_string()) detail = j["error"];
    } catch (const json::exception&) {
    }
  }
  const std::string tail = detail.empty() ? "" : " (the hub says: " + detail + ")";
  const std::string token_hint =
      has_token ? "" : "; if it is gated or private, set HF_TOKEN to a token that may read it";
  if (code == "GatedRepo") {
    throw Error(ErrorKind::invalid_argument,
                repo + " is gated: accept its conditions at https://huggingface.co/" + repo +
                    (has_token ? " with the account of your token" : " and set HF_TOKEN") + tail);
  }
  if (code == "RevisionNotFound") {
    throw Error(ErrorKind::not_found, what + ": no such revision" + tail);
  }
  if (code == "EntryNotFound") throw Error(ErrorKind::not_found, what + ": no such file" + tail);
  if (code == "RepoNotFound" || r.status == 401 || r.status == 404) {
    throw Error(ErrorKind::not_found, repo + ": no such model on the hub (HTTP " +
                                          std::to_string(r.status) + ")" + token_hint + tail);
  }
  if (r.status == 403) {
    throw Error(ErrorKind::invalid_argument,
                what + ": access refused (HTTP 403)" +
                    (has_token ? "; check the token's permissions" : token_hint) + tail);
  }
  throw Error(ErrorKind::io, what + ": HTTP " + std::to_string(r.status) + tail);
}

bool transient(const HttpResult& r) {
  return !r.transport_ok || r.status == 429 || r.status == 408 || r.status >= 500;
}

struct Listing {
  std::string commit;
  std::vector<HubFile> files;
};

Listing list_repo(HttpClient& http, const std::string& endpoint, const HubPullOptions& o,
                  const std::vector<std::string>& headers, bool has_token) {
  const std::string what = o.repo + "@" + o.revision;
  const std::string url = endpoint + "/api/models/" + o.repo + "/revision/" +
                          url_encode(o.revision, false) + "?blobs=true";
  HttpResult r;
  // Two quick retries: a listing that fails three times is a network problem to report now.
  for (int attempt = 0;; ++attempt) {
    r = http.get(url, headers);
    if (!transient(r) || attempt >= std::min(o.retries, 2)) break;
    log_warn("pull: " + url + ": " +
             (r.transport_ok ? "HTTP " + std::to_string(r.status) : r.transport_error) +
             "; retrying");
    std::this_thread::sleep_for(std::chrono::seconds(1 << attempt));
  }
  if (!r.transport_ok) {
    throw Error(ErrorKind::io, "cannot reach " + endpoint + " (" + r.transport_error +
                                   "); check the network, a proxy (https_proxy) or HF_ENDPOINT");
  }
  if (r.status != 200) throw_hub_error(r, what, o.repo, has_token);
  Listing out;
  try {
    json j = json::parse(r.body);
    out.commit = j.at("sha").get<std::string>();
    for (const auto& s : j.at("siblings")) {
      HubFile f;
      f.path = s.at("rfilename").get<std::string>();
      if (s.contains("lfs") && s["lfs"].is_object()) {
        f.lfs = true;
        f.blob_id = s["lfs"].at("sha256").get<std::string>();
        f.size = s["lfs"].at("size").get<uint64_t>();
      } else {
        f.blob_id = s.at("blobId").get<std::string>();
        f.size = s.at("size").get<uint64_t>();
      }
      check(safe_repo_path(f.path), ErrorKind::corrupt_data,
            what + ": the hub lists an unsafe file path '" + f.path + "'");
      check(is_hex(f.blob_id, 40, 64), ErrorKind::corrupt_data,
            what + ": the hub lists '" + f.path + "' without a valid blob id");
      out.files.push_back(std::move(f));
    }
  } catch (const json::exception& e) {
    throw Error(ErrorKind::corrupt_data, what + ": unexpected answer from " + endpoint +
                                             " (no file sizes or ids: " + e.what() + ")");
  }
  check(is_hex(out.commit, 40, 40), ErrorKind::corrupt_data,
        what + ": the hub's answer has no commit id");
  return out;
}

// flock on .locks/models--ORG--NAME/BLOB.lock, the lock huggingface_hub takes for a blob. Polled,
// so a pull that is stopping does not wait for another process's download to end.
class BlobLock {
 public:
  BlobLock(const fs::path& path, const std::atomic<bool>& stop) {
    fs::create_directories(path.parent_path());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    check(fd_ >= 0, ErrorKind::io, path.string() + ": cannot create the lock file");
    bool told = false;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        ::close(fd_);
        throw Error(ErrorKind::io, path.string() + ": cannot lock");
      }
      if (stop) {
        ::close(fd_);
        throw Error(ErrorKind::cancelled, path.string() + ": stopped while waiting for the lock");
      }
      if (!told)
        log_info("pull: waiting for another download of the same file (" + path.string() + ")");
      told = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~BlobLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

uint64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

struct Pull {
  explicit Pull(const HubPullOptions& opts) : o(opts) {}
  const HubPullOptions& o;
  std::string endpoint;
  std::vector<std::string> headers;
  bool has_token = false;
  fs::path repo_dir, locks_dir;
  std::string commit;
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<uint64_t> bytes_fetched{0};
  std::atomic<size_t> files_done{0}, files_fetched{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string current;

  fs::path blob_path(const HubFile& f) const { return repo_dir / "blobs" / f.blob_id; }
  bool have_blob(const HubFile& f) const {
    std::error_code ec;
    return fs::is_regular_file(blob_path(f), ec) && size_or_zero(blob_path(f)) == f.size;
  }

  void sleep_backoff(int attempt) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::seconds(1 << std::min(attempt, 4));
    while (!stop && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // The hash of a partial blob's first `hashed` bytes, kept across attempts so a retry does not
  // read back what is already on disk.
  struct PartHash {
    std::optional<Digest> digest;
    uint64_t hashed = 0;
  };

  // One attempt at the rest of `part`, ending in the finished blob (true) or a reason to retry.
  bool attempt(HttpClient& http, const HubFile& f, const fs::path& part, PartHash& ph,
               std::string& last_error) {
    const auto kind = f.lfs ? Digest::Kind::sha256 : Digest::Kind::git_blob_sha1;
    uint64_t have = size_or_zero(part);
    if (have > f.size) {                             // not a prefix of this file: start over
      bytes_done -= ph.digest ? ph.hashed : f.size;  // what the progress counted of it
      fs::remove(part);
      ph.digest.reset();
      have = 0;
    }
    if (!ph.digest || ph.hashed != have) {
      ph.digest.emplace(kind, f.size);
      ph.hashed = 0;
      if (have > 0) digest_file_prefix(*ph.digest, part, have);
      ph.hashed = have;
    }
    auto restart = [&] {
      fs::remove(part);
      bytes_done -= ph.hashed;
      ph.digest.reset();
      ph.hashed = 0;
    };
    std::FILE* out = std::fopen(part.c_str(), "ab");  // creates it, even for an empty file
    check(out != nullptr, ErrorKind::io, part.string() + ": cannot open for writing");
    if (have < f.size) {
      std::string refused;  // why the sink stopped the transfer (its functions cannot throw)
      bool retry = false;   // ... and whether another attempt may do better
      HttpSink sink;
      sink.begin = [&](uint64_t start, uint64_t total) {
        if (total != 0 && total != f.size) {
          refused = "the server's size (" + std::to_string(total) + ") is not the listed " +
                    std::to_string(f.size);
          return false;
        }
        if (start == have) return true;
        if (start != 0) {
          refused = "the server answered from byte " + std::to_string(start) + ", not " +
                    std::to_string(have);
          retry = true;
          return false;
        }
        out = std::freopen(part.c_str(), "wb", out);  // everything again: start over
        if (!out) {
          refused = part.string() + ": cannot open for writing";
          return false;
        }
        bytes_done -= ph.hashed;
        ph.digest.emplace(kind, f.size);
        ph.hashed = 0;
        return true;
      };
      sink.write = [&](const char* data, size_t n) {
        if (std::fwrite(data, 1, n, out) != n) {
          refused = part.string() + ": write failed (disk full?)";
          return false;
        }
        ph.digest->update(data, n);
        ph.hashed += n;
        bytes_done += n;
        bytes_fetched += n;
        return true;
      };
      sink.keep_going = [&] { return !stop.load(); };
      const std::string url =
          endpoint + "/" + o.repo + "/resolve/" + commit + "/" + url_encode(f.path, true);
      HttpResult r;
      try {
        r = http.download(url, headers, have, sink);
      } catch (...) {
        if (out) std::fclose(out);
        throw;
      }
      const bool closed = out && std::fclose(out) == 0;
      out = nullptr;
      if (retry) {
        restart();
        last_error = refused;
        return false;
      }
      if (!refused.empty()) throw Error(ErrorKind::io, o.repo + "/" + f.path + ": " + refused);
      if (r.aborted || stop) throw Error(ErrorKind::cancelled, f.path + ": download stopped");
      check(closed, ErrorKind::io, part.string() + ": write failed (disk full?)");
      if (r.transport_ok && r.status == 416) {  // a range past what the server has
        restart();
        last_error = "the server refused to resume";
        return false;
      }
      if (transient(r)) {
        last_error = r.transport_ok ? "HTTP " + std::to_string(r.status) : r.transport_error;
        return false;
      }
      if (r.status < 200 || r.status >= 300) {
        throw_hub_error(r, o.repo + "/" + f.path, o.repo, has_token);
      }
    }
    if (out) std::fclose(out);
    const uint64_t got = size_or_zero(part);
    if (got < f.size) {
      last_error = "the connection ended early";
      return false;
    }
    const std::string hash = ph.digest->hex();
    if (got != f.size || hash != f.blob_id) {
      restart();
      last_error = "the content does not match the hub's hash (" +
                   std::string(f.lfs ? "sha256 " : "git blob id ") + f.blob_id + ", got " + hash +
                   ")";
      return false;
    }
    fs::rename(part, blob_path(f));
    return true;
  }

  void download_blob(HttpClient& http, const HubFile& f) {
    {
      std::lock_guard<std::mutex> lock(mu);
      current = f.path;
    }
    const fs::path part = blob_path(f).string() + ".incomplete";
    std::string last_error;
    PartHash ph;
    for (int a = 0; a <= o.retries; ++a) {
      if (a > 0) {
        log_warn("pull: " + f.path + ": " + last_error + "; retrying (" + std::to_string(a) +
                 " of " + std::to_string(o.retries) + ")");
        sleep_backoff(a - 1);
        check(!stop, ErrorKind::cancelled, f.path + ": download stopped");
      }
      if (attempt(http, f, part, ph, last_error)) {
        files_fetched += 1;
        return;
      }
    }
    throw Error(ErrorKind::io, o.repo + "/" + f.path + ": download failed after " +
                                   std::to_string(o.retries + 1) + " attempts: " + last_error +
                                   " (run the same pull again to resume)");
  }

  void link(const HubFile& f) {
    const fs::path link = repo_dir / "snapshots" / commit / f.path;
    fs::create_directories(link.parent_path());
    const fs::path target = blob_path(f).lexically_relative(link.parent_path());
    std::error_code ec;
    auto in_place = [&] {
      if (fs::is_symlink(link, ec)) return fs::read_symlink(link, ec) == target;
      return fs::is_regular_file(link, ec) && size_or_zero(link) == f.size;  // a copy
    };
    if (in_place()) return;
    fs::remove(link, ec);
    fs::create_symlink(target, link, ec);
    if (!ec || in_place()) return;  // made here, or by a pull running beside this one
    fs::copy_file(blob_path(f), link, fs::copy_options::overwrite_existing);  // no symlinks here
  }

  void fetch(HttpClient& http, const HubFile& f) {
    if (!have_blob(f)) {
      BlobLock lock(locks_dir / (f.blob_id + ".lock"), stop);
      if (!have_blob(f)) download_blob(http, f);
    }
    link(f);
    files_done += 1;
  }
};

void write_ref(const fs::path& repo_dir, const std::string& revision, const std::string& commit) {
  const fs::path ref = repo_dir / "refs" / revision;
  fs::create_directories(ref.parent_path());
  // A name of this process and thread: a pull running beside this one writes its own.
  const fs::path tmp = ref.string() + "." + std::to_string(::getpid()) + "." +
                       std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) +
                       ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;  // no newline, as huggingface_hub writes (and reads) it
    check(static_cast<bool>(out), ErrorKind::io, tmp.string() + ": write failed");
  }
  fs::rename(tmp, ref);
}

}  // namespace

HubPullResult hub_pull(const HubPullOptions& o) {
  check_repo_name(o.repo);
  check(safe_repo_path(o.revision), ErrorKind::invalid_argument,
        "'" + o.revision + "' is not a revision (a branch, tag or commit)");
  for (const char* name : {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}) {
    const char* raw = std::getenv(name);
    std::string v = raw ? raw : "";
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    check(!(v == "1" || v == "on" || v == "yes" || v == "true"), ErrorKind::invalid_argument,
          std::string(name) + " is set: a pull needs the network (unset it to download)");
  }
  Pull p(o);
  p.endpoint = o.endpoint.empty() ? hub_endpoint() : o.endpoint;
  const std::string token = o.token.empty() ? hub_token() : o.token;
  p.has_token = !token.empty();
  if (p.has_token) p.headers.push_back("Authorization: Bearer " + token);
  const fs::path cache = fs::absolute(o.cache_dir.empty() ? hub_cache_dir() : o.cache_dir);
  const std::string folder = hub_repo_folder(o.repo);
  p.repo_dir = (cache / folder).lexically_normal();
  p.locks_dir = (cache / ".locks" / folder).lexically_normal();

  HttpClient http;
  Listing listing = list_repo(http, p.endpoint, o, p.headers, p.has_token);
  p.commit = listing.commit;
  const std::string what = o.repo + "@" + o.revision;

  HubPullResult result;
  for (const auto& f : listing.files) {
    bool wanted = false;
    for (const auto& g : o.include) wanted = wanted || ::fnmatch(g.c_str(), f.path.c_str(), 0) == 0;
    if (o.include.empty() ? hub_default_file(f.path) : wanted) result.files.push_back(f);
  }
  if (o.include.empty()) {
    auto has = [&](auto pred) {
      return std::any_of(result.files.begin(), result.files.end(), pred);
    };
    check(has([](const HubFile& f) { return f.path == "config.json"; }), ErrorKind::unsupported,
          what + " has no config.json: not a Hugging Face transformers checkpoint");
    if (!has([](const HubFile& f) {
          return f.path.size() > 12 && f.path.ends_with(".safetensors");
        })) {
      std::string names;
      for (size_t i = 0; i < listing.files.size() && i < 8; ++i)
        names += " " + listing.files[i].path;
      throw Error(ErrorKind::unsupported,
                  what +
                      " has no .safetensors weights at its top level (hibana reads safetensors; "
                      "the repository has:" +
                      names + (listing.files.size() > 8 ? " ..." : "") + ")");
    }
  }
  check(!result.files.empty(), ErrorKind::not_found, what + ": no file matches --include");
  // config.json first (the caller checks it before the weights move), then the largest first,
  // so the pull does not end with one thread on the biggest shard.
  std::stable_sort(result.files.begin(), result.files.end(),
                   [](const HubFile& a, const HubFile& b) {
                     if ((a.path == "config.json") != (b.path == "config.json"))
                       return a.path == "config.json";
                     return a.size > b.size;
                   });

  uint64_t total = 0, partial = 0;
  std::set<std::string> blobs;  // files with the same content share a blob
  for (const auto& f : result.files) {
    if (p.have_blob(f) || !blobs.insert(f.blob_id).second) continue;
    total += f.size;
    partial += std::min<uint64_t>(size_or_zero(p.blob_path(f).string() + ".incomplete"), f.size);
  }
  fs::create_directories(p.repo_dir / "blobs");
  const uint64_t need = total - partial;
  const auto space = fs::space(p.repo_dir);
  check(need <= space.available, ErrorKind::io,
        what + " needs " + byte_text(static_cast<double>(need)) + " more on disk, but " +
            p.repo_dir.string() + " has " + byte_text(static_cast<double>(space.available)) +
            " free (set HF_HUB_CACHE to a larger disk)");
  p.bytes_done = partial;
  if (o.started) {
    HubProgress pr;
    pr.bytes_done = partial;
    pr.bytes_total = total;
    pr.files_total = result.files.size();
    o.started(pr, p.commit);
  }

  std::mutex qmu;
  size_t next = 0;
  if (const HubFile& f = result.files.front(); f.path == "config.json") {  // alone, first
    p.fetch(http, f);
    if (o.check_config) o.check_config(read_text_file(p.blob_path(f).string()));
    next = 1;
  }
  std::exception_ptr failure;
  auto worker = [&] {
    try {
      HttpClient client;
      for (;;) {
        const HubFile* f = nullptr;
        {
          std::lock_guard<std::mutex> lock(qmu);
          if (next == result.files.size() || p.stop) return;
          f = &result.files[next++];
        }
        p.fetch(client, *f);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(qmu);
      if (!failure) failure = std::current_exception();
      p.stop = true;
    }
  };
  std::vector<std::thread> threads;
  const int jobs = std::max(1, std::min<int>(o.jobs, static_cast<int>(result.files.size())));
  std::atomic<int> running{0};
  try {
    for (int i = 0; i < jobs; ++i) {
      running += 1;
      threads.emplace_back([&] {
        worker();
        running -= 1;
      });
    }
    auto last = std::chrono::steady_clock::now();
    while (running > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!o.progress || std::chrono::steady_clock::now() - last < std::chrono::seconds(1)) {
        continue;
      }
      last = std::chrono::steady_clock::now();
      HubProgress pr;
      pr.bytes_done = p.bytes_done;
      pr.bytes_total = total;
      pr.files_done = p.files_done;
      pr.files_total = result.files.size();
      {
        std::lock_guard<std::mutex> lock(p.mu);
        pr.current = p.current;
      }
      o.progress(pr);
    }
  } catch (...) {  // a thread that did not start, or the progress callback: stop the others
    p.stop = true;
    for (auto& t : threads) t.join();
    throw;
  }
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
  if (o.revision != p.commit) write_ref(p.repo_dir, o.revision, p.commit);
  result.snapshot_dir = (p.repo_dir / "snapshots" / p.commit).string();
  result.commit = p.commit;
  result.files_downloaded = p.files_fetched;
  result.bytes_downloaded = p.bytes_fetched;
  return result;
}

}  // namespace hibana
