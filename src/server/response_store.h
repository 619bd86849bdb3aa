// Responses kept in memory for the Responses API (`store`, the default): what a later request
// continues with `previous_response_id`, and what GET/DELETE /v1/responses/{id} read. Each entry
// holds the whole conversation that led to the response (every input item, earlier responses'
// outputs included) and the response object as it was returned, both as JSON text, and is
// also found by the ids of its output items (an `item_reference` input item names one). A bounded
// LRU: at most `max_responses` entries and `max_bytes` of JSON text, the least recently used
// evicted first. Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/api_error.h"

namespace hibana::server {

struct StoredResponse {
  std::string conversation;           // JSON array: the input items, earlier turns included
  std::string response;               // JSON object: the response as returned (output, usage, ...)
  std::vector<std::string> item_ids;  // ids of the response's output items (item_reference)
};

struct ResponseStoreLimits {
  size_t max_responses = 256;  // 0: nothing is kept
  size_t max_bytes = size_t(64) << 20;
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreLimits limits = {}) : limits_(limits) {}

  // Keeps (or replaces) `id`, evicting the least recently used entries past the limits. An
  // entry larger than max_bytes by itself is not kept.
  void put(const std::string& id, StoredResponse response);
  // The entry, now the most recently used; null when unknown or evicted.
  std::shared_ptr<const StoredResponse> get(const std::string& id);
  // Whether `id` was there.
  bool remove(const std::string& id);
  // The entry with an output item `item_id` (the last one kept with it), now the most recently
  // used; null when no entry has it.
  std::shared_ptr<const StoredResponse> find_item(const std::string& item_id);

  size_t size() const;
  size_t bytes() const;
  const ResponseStoreLimits& limits() const { return limits_; }

 private:
  struct Entry {
    std::shared_ptr<const StoredResponse> value;
    size_t bytes = 0;
    std::list<std::string>::iterator order;
  };
  void erase(std::unordered_map<std::string, Entry>::iterator it);

  ResponseStoreLimits limits_;
  mutable std::mutex mutex_;
  std::list<std::string> order_;  // most recently used first
  std::unordered_map<std::string, Entry> entries_;
  std::unordered_map<std::string, std::string> items_;  // output item id -> response id
  size_t bytes_ = 0;
};

// What the store keeps, for error messages: "this server does not store responses", or "the
// server keeps the last N stored responses in memory, up to M MiB".
std::string stored_responses_note(const ResponseStore* store);

// 404 for a response that is not (or no longer) stored, saying what the store keeps; `store`
// may be null (the server keeps nothing). `code` and `param` as OpenAI sets them.
ApiError response_not_found(const ResponseStore* store, const std::string& id,
                            const std::string& code = "not_found", const std::string& param = {});

}  // namespace hibana::server
