// Reading request bodies: typed field access whose errors name the field (a 400 that says
// "max_tokens: expected an integer" instead of a parser exception), and writing JSON that never
// throws on invalid UTF-8 (model output can hold partial characters). Internal to server/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace hibana::server {

using Json = nlohmann::ordered_json;

// Parses a request body; throws a 400 ApiError for malformed JSON or a non-object.
Json parse_body(std::string_view body);

// Serialises compactly; invalid UTF-8 becomes U+FFFD instead of throwing.
std::string dump(const Json& j);

// The member `key` of `obj`, or nullptr when it is absent or null.
const Json* member(const Json& obj, std::string_view key);

std::string field_path(const std::string& parent, std::string_view key);

std::optional<std::string> opt_string(const Json& obj, std::string_view key,
                                      const std::string& path);
std::optional<bool> opt_bool(const Json& obj, std::string_view key, const std::string& path);
std::optional<int64_t> opt_int(const Json& obj, std::string_view key, const std::string& path);
std::optional<double> opt_number(const Json& obj, std::string_view key, const std::string& path);
// Present and an object/array, else a 400 naming the field.
const Json* opt_object(const Json& obj, std::string_view key, const std::string& path);
const Json* opt_array(const Json& obj, std::string_view key, const std::string& path);
std::string req_string(const Json& obj, std::string_view key, const std::string& path);

// Text of content given as a string or as an array of parts ({"type": "text", "text": ...};
// types listed in `text_types`); non-text parts become `placeholder(type)`. Parts are joined
// with "\n".
std::string content_text(const Json& content, const std::string& path,
                         std::initializer_list<std::string_view> text_types);

}  // namespace hibana::server
