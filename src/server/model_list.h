// GET /v1/models and /v1/models/{id}. One list satisfies both clients: OpenAI's shape
// ({object: "list", data: [{id, object: "model", created, owned_by}]}) and Anthropic's
// ({data: [{type: "model", id, display_name, created_at}], has_more, first_id, last_id}),
// plus max_model_len as vLLM reports it.
#pragma once

#include <string>

#include "server/served_model.h"

namespace hibana::server {

std::string model_list_json(const ServedModel& model);
// 404 ApiError when `id` is not one of the model's names.
std::string model_json(const ServedModel& model, const std::string& id);

}  // namespace hibana::server
