#include "server/response_store.h"

namespace hibana::server {

void ResponseStore::put(const std::string& id, StoredResponse response) {
  size_t bytes = id.size() + response.conversation.size() + response.response.size();
  for (const std::string& item : response.item_ids) bytes += item.size();
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = entries_.find(id); it != entries_.end()) erase(it);
  if (limits_.max_responses == 0 || bytes > limits_.max_bytes) return;
  while (!order_.empty() &&
         (entries_.size() >= limits_.max_responses || bytes_ + bytes > limits_.max_bytes)) {
    erase(entries_.find(order_.back()));
  }
  order_.push_front(id);
  Entry e;
  e.value = std::make_shared<const StoredResponse>(std::move(response));
  e.bytes = bytes;
  e.order = order_.begin();
  for (const std::string& item : e.value->item_ids) items_[item] = id;
  entries_.emplace(id, std::move(e));
  bytes_ += bytes;
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second.order);
  return it->second.value;
}

std::shared_ptr<const StoredResponse> ResponseStore::find_item(const std::string& item_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto item = items_.find(item_id);
  if (item == items_.end()) return nullptr;
  auto it = entries_.find(item->second);
  if (it == entries_.end()) return nullptr;
  order_.splice(order_.begin(), order_, it->second.order);
  return it->second.value;
}

bool ResponseStore::remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

void ResponseStore::erase(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  for (const std::string& item : it->second.value->item_ids) {
    auto owner = items_.find(item);
    if (owner != items_.end() && owner->second == it->first) items_.erase(owner);
  }
  order_.erase(it->second.order);
  entries_.erase(it);
}

std::string stored_responses_note(const ResponseStore* store) {
  std::string kept = "this server does not store responses";
  if (store && store->limits().max_responses > 0) {
    const size_t bytes = store->limits().max_bytes;
    kept = "the server keeps the last " + std::to_string(store->limits().max_responses) +
           " stored responses in memory, up to " +
           (bytes % (size_t(1) << 20) == 0 ? std::to_string(bytes >> 20) + " MiB"
                                           : std::to_string(bytes) + " bytes");
  }
  return kept;
}

ApiError response_not_found(const ResponseStore* store, const std::string& id,
                            const std::string& code, const std::string& param) {
  return ApiError(404, "response '" + id + "' not found (" + stored_responses_note(store) + ")",
                  code, param);
}

}  // namespace hibana::server
