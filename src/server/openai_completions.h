// OpenAI (legacy) Completions: POST /v1/completions. The prompt is tokenized as given (special
// tokens in it are recognised), with no chat template and no reasoning or tool-call parsing.
// The prompt may be a string, a list of strings, a list of token ids or a list of such lists;
// each prompt gets n choices (index = prompt * n + choice).
#pragma once

#include <string_view>

#include "server/api_types.h"
#include "server/served_model.h"

namespace hibana::server {

ApiResponse handle_completions(const ServedModel& model, const RequestContext& context,
                               std::string_view body);

}  // namespace hibana::server
