// A small HTTP(S) client over libcurl for the one network use hibana has: downloading a model the
// user asked for. Follows redirects (the Hugging Face hub answers file requests with a redirect
// to its CDN; curl drops the Authorization header when the host changes), honours the usual
// proxy variables (https_proxy, no_proxy), and gives up on a connection that stalls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hibana {

struct HttpResult {
  bool transport_ok = false;    // false: no HTTP answer (DNS, refused, reset, stalled, aborted)
  std::string transport_error;  // curl's message when !transport_ok
  bool aborted = false;         // the sink stopped the transfer
  long status = 0;              // of the last response (after redirects)
  std::map<std::string, std::string> headers;  // of the last response, names in lower case
  std::string body;  // the body of an API call, or of an error response (capped)
};

// What a download does with the bytes of a successful (2xx) response.
// Its functions run inside libcurl's callbacks: they must not throw; returning false stops the
// transfer (HttpResult::aborted), the sink keeping its own reason.
struct HttpSink {
  // Called once before the first byte: where the response starts in the file (the Range
  // offset on 206, 0 when the server sent everything), and its total size if known (else 0).
  std::function<bool(uint64_t start, uint64_t total)> begin;
  std::function<bool(const char* data, size_t n)> write;
  std::function<bool()> keep_going;  // polled several times a second and on every block
};

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // GET into memory (up to max_bytes; more is a transport error).
  HttpResult get(const std::string& url, const std::vector<std::string>& headers,
                 size_t max_bytes = 64u << 20);
  // GET streamed into `sink`, asking for the bytes from `offset` on (Range) when offset > 0.
  // Error responses (non-2xx) land in HttpResult::body instead of the sink.
  HttpResult download(const std::string& url, const std::vector<std::string>& headers,
                      uint64_t offset, const HttpSink& sink);

 private:
  void* curl_ = nullptr;
};

// Percent-encodes everything but unreserved characters (and '/', when keep_slash).
std::string url_encode(const std::string& s, bool keep_slash);

}  // namespace hibana
