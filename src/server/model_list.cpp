#include "server/model_list.h"

#include <ctime>

#include "server/json_fields.h"

namespace hibana::server {

namespace {

std::string rfc3339(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Json entry(const ServedModel& model, const std::string& name) {
  Json j = Json::object();
  j["id"] = name;
  j["object"] = "model";
  j["type"] = "model";
  j["created"] = model.created;
  j["created_at"] = rfc3339(model.created);
  j["owned_by"] = "hibana";
  j["display_name"] = name;
  j["max_model_len"] = model.max_context();
  return j;
}

}  // namespace

std::string model_list_json(const ServedModel& model) {
  Json data = Json::array();
  for (const auto& name : model.names) data.push_back(entry(model, name));
  Json j = Json::object();
  j["object"] = "list";
  j["data"] = std::move(data);
  j["has_more"] = false;
  j["first_id"] = model.names.front();
  j["last_id"] = model.names.back();
  return dump(j);
}

std::string model_json(const ServedModel& model, const std::string& id) {
  if (id.empty()) throw ApiError(404, "no model id given", "model_not_found");
  model.check_model(id);
  return dump(entry(model, id));
}

}  // namespace hibana::server
