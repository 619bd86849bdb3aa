#include "server/json_fields.h"

#include <cmath>

namespace hibana::server {

namespace {

const char* type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    default:
      return "an unsupported value";
  }
}

ApiError wrong_type(const std::string& path, const char* expected, const Json& got) {
  return invalid_field(path, std::string("expected ") + expected + ", got " + type_name(got));
}

}  // namespace

Json parse_body(std::string_view body) {
  // Real requests nest a few dozen levels at most (tool schemas); code that walks the request
  // recursively (dumping, schema conversion, templates) must never see more than this.
  constexpr int kMaxDepth = 256;
  auto limit_depth = [](int depth, Json::parse_event_t, Json&) {
    if (depth > kMaxDepth) {
      throw ApiError(400, "the request body nests deeper than " + std::to_string(kMaxDepth) +
                              " levels");
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(body.begin(), body.end(), limit_depth);
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> the message.
    size_t at = what.find("] ");
    throw ApiError(400, "the request body is not valid JSON: " +
                            (at == std::string::npos ? what : what.substr(at + 2)));
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

std::string dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

const Json* member(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string field_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::optional<std::string> opt_string(const Json& obj, std::string_view key,
                                      const std::string& path) {
  const Json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw wrong_type(field_path(path, key), "a string", *v);
  return v->get<std::string>();
}

std::optional<bool> opt_bool(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw wrong_type(field_path(path, key), "a boolean", *v);
  return v->get<bool>();
}

std::optional<int64_t> opt_int(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_unsigned()) {
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      throw invalid_field(field_path(path, key), "is too large");
    }
    return static_cast<int64_t>(u);
  }
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
      return static_cast<int64_t>(d);
    }
  }
  throw wrong_type(field_path(path, key), "an integer", *v);
}

std::optional<double> opt_number(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = member(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw wrong_type(field_path(path, key), "a number", *v);
  return v->get<double>();
}

const Json* opt_object(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = member(obj, key);
  if (v && !v->is_object()) throw wrong_type(field_path(path, key), "an object", *v);
  return v;
}

const Json* opt_array(const Json& obj, std::string_view key, const std::string& path) {
  const Json* v = member(obj, key);
  if (v && !v->is_array()) throw wrong_type(field_path(path, key), "an array", *v);
  return v;
}

std::string req_string(const Json& obj, std::string_view key, const std::string& path) {
  auto v = opt_string(obj, key, path);
  if (!v) throw invalid_field(field_path(path, key), "is required");
  return *v;
}

std::string content_text(const Json& content, const std::string& path,
                         std::initializer_list<std::string_view> text_types) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw wrong_type(path, "a string or an array of content parts", content);
  std::string out;
  bool first = true;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string where = path + "[" + std::to_string(i) + "]";
    std::string text;
    if (part.is_string()) {
      text = part.get<std::string>();
    } else if (part.is_object()) {
      std::string type = opt_string(part, "type", where).value_or("text");
      bool is_text = false;
      for (std::string_view t : text_types) is_text = is_text || type == t;
      if (is_text) {
        text = req_string(part, "text", where);
      } else if (type == "image_url" || type == "image" || type == "input_image") {
        text = "[image omitted: this model reads text only]";
      } else if (type == "refusal") {
        text = opt_string(part, "refusal", where).value_or("");
      } else {
        throw invalid_field(where + ".type", "unsupported content part type '" + type + "'");
      }
    } else {
      throw wrong_type(where, "a content part object", part);
    }
    if (!first) out += '\n';
    first = false;
    out += text;
  }
  return out;
}

}  // namespace hibana::server
