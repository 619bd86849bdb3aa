// A Hugging Face hub on 127.0.0.1 for the pull tests (HF_ENDPOINT points at it): the repo-info
// API with blob ids and sizes, /resolve/ answering LFS files with a redirect to a "CDN" path and
// small files directly, byte ranges, and faults to inject (a token to require, a connection cut
// after some bytes, a corrupted file, ranges ignored). Records what it was asked.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/digest.h"

namespace hibana::test {

struct FakeHubFile {
  std::string path;
  std::string content;
  bool lfs = false;
  // What the hub names the content by: its sha256 (LFS) or git blob id.
  std::string blob_id() const {
    if (cached_id.empty()) {
      Digest d(lfs ? Digest::Kind::sha256 : Digest::Kind::git_blob_sha1, content.size());
      d.update(content.data(), content.size());
      cached_id = d.hex();
    }
    return cached_id;
  }
  mutable std::string cached_id = {};
};

class FakeHub {
 public:
  FakeHub(std::string repo, std::vector<FakeHubFile> files)
      : repo_(std::move(repo)), files_(std::move(files)) {
    server_.Get(R"(/api/models/([^/]+/[^/]+)/revision/([^/?]+))",
                [this](const httplib::Request& q, httplib::Response& r) { info(q, r); });
    server_.Get(R"(/([^/]+/[^/]+)/resolve/([0-9a-f]+)/(.+))",
                [this](const httplib::Request& q, httplib::Response& r) { resolve(q, r); });
    server_.Get(R"(/cdn/([0-9a-f]+))", [this](const httplib::Request& q, httplib::Response& r) {
      note(q, "cdn");
      const FakeHubFile* f = by_blob(q.matches[1]);
      if (!f) {
        r.status = 404;
        return;
      }
      serve(q, r, *f);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("FakeHub: cannot bind a port on 127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeHub() {
    server_.stop();
    thread_.join();
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";

  // Faults.
  std::string required_token;              // non-empty: 401 GatedRepo unless "Bearer <it>"
  bool gate_files_only = false;            // ... on /resolve/ only (the hub lists gated repos)
  std::atomic<long> cut_after{-1};         // the next longer file ends after this many bytes
  std::set<std::string> corrupt;           // paths served with their first byte changed
  std::atomic<bool> ignore_ranges{false};  // answer ranges with the whole file (200, chunked)

  // Observations.
  struct Seen {
    std::string path, range, auth;
  };
  std::vector<Seen> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  size_t file_requests(const std::string& path) {
    size_t n = 0;
    for (const auto& s : seen()) n += s.path == path;
    return n;
  }
  std::atomic<uint64_t> bytes_served{0};

 private:
  void note(const httplib::Request& q, const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.push_back({path, q.get_header_value("Range"), q.get_header_value("Authorization")});
  }
  bool authorised(const httplib::Request& q, httplib::Response& r) {
    if (required_token.empty() ||
        q.get_header_value("Authorization") == "Bearer " + required_token) {
      return true;
    }
    r.status = 401;
    r.set_header("X-Error-Code", "GatedRepo");
    r.set_header("X-Error-Message", "Access to model " + repo_ + " is restricted.");
    return false;
  }
  const FakeHubFile* by_blob(const std::string& id) const {
    for (const auto& f : files_) {
      if (f.blob_id() == id) return &f;
    }
    return nullptr;
  }
  void info(const httplib::Request& q, httplib::Response& r) {
    note(q, "api");
    if (!gate_files_only && !authorised(q, r)) return;
    if (q.matches[1] != repo_) {
      r.status = 401;  // the hub hides whether a repo exists
      r.set_header("X-Error-Code", "RepoNotFound");
      return;
    }
    if (q.matches[2] != "main" && q.matches[2] != commit) {
      r.status = 404;
      r.set_header("X-Error-Code", "RevisionNotFound");
      r.set_content(R"({"error":"Invalid rev id: )" + std::string(q.matches[2]) + "\"}",
                    "application/json");
      return;
    }
    nlohmann::json siblings = nlohmann::json::array();
    for (const auto& f : files_) {
      nlohmann::json s = {{"rfilename", f.path}, {"size", f.content.size()}};
      if (f.lfs) {
        s["blobId"] = std::string(40, 'e');  // the pointer file's id, not the content's
        s["lfs"] = {{"sha256", f.blob_id()}, {"size", f.content.size()}, {"pointerSize", 134}};
      } else {
        s["blobId"] = f.blob_id();
      }
      siblings.push_back(s);
    }
    r.set_content(nlohmann::json({{"id", repo_}, {"sha", commit}, {"siblings", siblings}}).dump(),
                  "application/json");
  }
  void resolve(const httplib::Request& q, httplib::Response& r) {
    const std::string path = q.matches[3];
    note(q, path);
    if (!authorised(q, r)) return;
    for (const auto& f : files_) {
      if (f.path != path) continue;
      if (f.lfs) {
        r.status = 302;
        // Another host name for the same server, as the hub's CDN is another host: a client
        // must not send it the token.
        r.set_header("Location",
                     "http://localhost:" + std::to_string(port_) + "/cdn/" + f.blob_id());
        r.set_header("X-Linked-Etag", "\"" + f.blob_id() + "\"");
        return;
      }
      serve(q, r, f);
      return;
    }
    r.status = 404;
    r.set_header("X-Error-Code", "EntryNotFound");
  }
  void serve(const httplib::Request& q, httplib::Response& r, const FakeHubFile& f) {
    auto content = std::make_shared<std::string>(f.content);
    if (corrupt.count(f.path) && !content->empty()) (*content)[0] ^= 0x5a;
    long cut = -1;  // the cut applies to the first file long enough to be cut
    if (cut_after >= 0 && static_cast<long>(content->size()) > cut_after)
      cut = cut_after.exchange(-1);
    if (ignore_ranges) {
      r.set_chunked_content_provider("application/octet-stream",
                                     [this, content](size_t, httplib::DataSink& sink) {
                                       sink.write(content->data(), content->size());
                                       bytes_served += content->size();
                                       sink.done();
                                       return true;
                                     });
      return;
    }
    r.set_content_provider(
        content->size(), "application/octet-stream",
        [this, content, cut](size_t offset, size_t length, httplib::DataSink& sink) {
          size_t n = std::min<size_t>(length, 65536);
          if (cut >= 0) {
            if (static_cast<size_t>(cut) <= offset) return false;  // hang up
            n = std::min<size_t>(n, static_cast<size_t>(cut) - offset);
          }
          sink.write(content->data() + offset, n);
          bytes_served += n;
          return true;
        });
  }

  std::string repo_;
  std::vector<FakeHubFile> files_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Seen> seen_;
};

}  // namespace hibana::test
