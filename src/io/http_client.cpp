#include "io/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <mutex>

#include "core/error.h"

namespace hibana {

namespace {

std::once_flag g_curl_once;

struct Transfer {
  HttpResult* result = nullptr;
  const HttpSink* sink = nullptr;  // null: collect the body in memory
  size_t max_bytes = 0;
  CURL* curl = nullptr;
  bool started = false;  // begin() called for this response
  bool to_sink = false;  // this response's body goes to the sink
  bool too_large = false;
  uint64_t offset = 0;
  std::exception_ptr error;  // thrown inside a callback: rethrown once curl has returned
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

size_t header_line(Transfer* t, char* data, size_t size, size_t n) {
  std::string line(data, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {
    t->result->headers.clear();  // a new response (after a redirect or a 100 Continue)
  } else if (auto colon = line.find(':'); colon != std::string::npos) {
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    t->result->headers[lower(line.substr(0, colon))] = value;
  }
  return size * n;
}

// Where a 206's bytes start and the whole size, from "Content-Range: bytes A-B/TOTAL".
void parse_content_range(const std::string& v, uint64_t& start, uint64_t& total) {
  const size_t sp = v.find(' '), dash = v.find('-'), slash = v.find('/');
  if (sp == std::string::npos || dash == std::string::npos || slash == std::string::npos) return;
  try {
    start = std::stoull(v.substr(sp + 1, dash - sp - 1));
    if (v.compare(slash + 1, std::string::npos, "*") != 0) total = std::stoull(v.substr(slash + 1));
  } catch (const std::exception&) {
  }
}

size_t body_bytes(Transfer* t, char* data, size_t size, size_t n) {
  const size_t bytes = size * n;
  if (!t->started) {
    t->started = true;
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    t->to_sink = t->sink && status >= 200 && status < 300;
    if (t->to_sink) {
      uint64_t start = 0, total = 0;
      auto& h = t->result->headers;
      if (status == 206 && h.count("content-range")) {
        // A 206 without it is taken as the whole file: if it was not, the caller's size or
        // hash check fails and it asks again without a range.
        parse_content_range(h["content-range"], start, total);
      } else if (h.count("content-length")) {
        try {
          total = std::stoull(h["content-length"]);
        } catch (const std::exception&) {
        }
      }
      if (status != 206) start = 0;  // the server ignored the Range: everything again
      if (t->sink->begin && !t->sink->begin(start, total)) {
        t->result->aborted = true;
        return 0;  // curl stops with CURLE_WRITE_ERROR
      }
    }
  }
  if (t->to_sink) {
    if ((t->sink->keep_going && !t->sink->keep_going()) || !t->sink->write(data, bytes)) {
      t->result->aborted = true;
      return 0;
    }
    return bytes;
  }
  // An API body, or an error body (kept short: it only goes into a message).
  const size_t cap = t->sink ? (64u << 10) : t->max_bytes;
  if (t->result->body.size() + bytes > cap) {
    if (!t->sink) {
      t->too_large = true;
      return 0;
    }
    return bytes;
  }
  t->result->body.append(data, bytes);
  return bytes;
}

// libcurl is C: nothing may be thrown through it. A callback's exception stops the transfer
// (the callback returns `stop`) and is rethrown when curl_easy_perform returns.
template <typename R, typename F>
R guarded(void* user, R stop, F&& body) {
  auto* t = static_cast<Transfer*>(user);
  try {
    return body(t);
  } catch (...) {
    t->error = std::current_exception();
    return stop;
  }
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  return guarded<size_t>(user, 0, [&](Transfer* t) { return header_line(t, data, size, n); });
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  return guarded<size_t>(user, 0, [&](Transfer* t) { return body_bytes(t, data, size, n); });
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return guarded<int>(user, 1, [](Transfer* t) {
    if (t->sink && t->sink->keep_going && !t->sink->keep_going()) {
      t->result->aborted = true;
      return 1;
    }
    return 0;
  });
}

HttpResult perform(CURL* curl, const std::string& url, const std::vector<std::string>& headers,
                   Transfer& t) {
  HttpResult result;
  t.result = &result;
  t.curl = curl;
  curl_easy_reset(curl);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "hibana/" HIBANA_VERSION);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
  // A transfer slower than 1 KiB/s for a minute is dead: fail it (the caller retries).
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  std::string range;
  if (t.offset > 0) {
    range = std::to_string(t.offset) + "-";
    curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  }
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(list);
  if (t.error) std::rethrow_exception(t.error);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &result.status);
  if (rc == CURLE_OK) {
    result.transport_ok = true;
  } else if (t.too_large) {
    result.transport_error = url + ": the answer is larger than expected";
  } else if (!result.aborted) {
    result.transport_error = curl_easy_strerror(rc);
  }
  // A sink that saw no bytes still learns where the (empty) response starts.
  if (rc == CURLE_OK && t.sink && t.sink->begin && !t.started && result.status >= 200 &&
      result.status < 300 &&
      !t.sink->begin(t.offset > 0 && result.status == 206 ? t.offset : 0, 0)) {
    result.aborted = true;
  }
  return result;
}

}  // namespace

HttpClient::HttpClient() {
  std::call_once(g_curl_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  if (!curl_) throw Error(ErrorKind::internal, "libcurl: cannot create a handle");
}

HttpClient::~HttpClient() {
  curl_easy_cleanup(static_cast<CURL*>(curl_));
}

HttpResult HttpClient::get(const std::string& url, const std::vector<std::string>& headers,
                           size_t max_bytes) {
  Transfer t;
  t.max_bytes = max_bytes;
  return perform(static_cast<CURL*>(curl_), url, headers, t);
}

HttpResult HttpClient::download(const std::string& url, const std::vector<std::string>& headers,
                                uint64_t offset, const HttpSink& sink) {
  Transfer t;
  t.sink = &sink;
  t.offset = offset;
  return perform(static_cast<CURL*>(curl_), url, headers, t);
}

std::string url_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace hibana
