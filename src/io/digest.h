// Streaming content hashes (OpenSSL's libcrypto): SHA-256, which names a Hugging Face LFS blob,
// and git's blob id (SHA-1 of "blob <size>\0" + content), which names a small git file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hibana {

class Digest {
 public:
  enum class Kind { sha256, git_blob_sha1 };
  // git_blob_sha1 needs the content's size up front (git hashes a header before the bytes).
  Digest(Kind kind, uint64_t size = 0);
  ~Digest();

  void update(const void* data, size_t n);
  std::string hex();  // lower-case hex of the digest; ends the hash

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Hashes a file's first `bytes` bytes into `digest` (resuming a partial download).
void digest_file_prefix(Digest& digest, const std::string& path, uint64_t bytes);

}  // namespace hibana
