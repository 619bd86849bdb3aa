#include "io/digest.h"

#include <openssl/evp.h>

#include <cstdio>
#include <vector>

#include "core/error.h"

namespace hibana {

struct Digest::State {
  EVP_MD_CTX* ctx = nullptr;
  ~State() { EVP_MD_CTX_free(ctx); }
};

Digest::Digest(Kind kind, uint64_t size) : s_(std::make_unique<State>()) {
  s_->ctx = EVP_MD_CTX_new();
  const EVP_MD* md = kind == Kind::sha256 ? EVP_sha256() : EVP_sha1();
  if (!s_->ctx || EVP_DigestInit_ex(s_->ctx, md, nullptr) != 1) {
    throw Error(ErrorKind::internal, "libcrypto: cannot start a digest");
  }
  if (kind == Kind::git_blob_sha1) {
    const std::string header = "blob " + std::to_string(size);
    update(header.data(), header.size() + 1);  // with the terminating NUL, as git hashes it
  }
}

Digest::~Digest() = default;

void Digest::update(const void* data, size_t n) {
  if (n != 0 && EVP_DigestUpdate(s_->ctx, data, n) != 1) {
    throw Error(ErrorKind::internal, "libcrypto: digest update failed");
  }
}

std::string Digest::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(s_->ctx, md, &len) != 1) {
    throw Error(ErrorKind::internal, "libcrypto: digest final failed");
  }
  static const char* digits = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = digits[md[i] >> 4];
    out[2 * i + 1] = digits[md[i] & 15];
  }
  return out;
}

void digest_file_prefix(Digest& digest, const std::string& path, uint64_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error(ErrorKind::io, path + ": cannot open to hash it");
  std::vector<char> buf(1 << 20);
  uint64_t left = bytes;
  while (left > 0) {
    const size_t want = left < buf.size() ? static_cast<size_t>(left) : buf.size();
    const size_t got = std::fread(buf.data(), 1, want, f);
    if (got == 0) break;
    digest.update(buf.data(), got);
    left -= got;
  }
  std::fclose(f);
  if (left != 0) throw Error(ErrorKind::io, path + ": shorter than expected while hashing it");
}

}  // namespace hibana
