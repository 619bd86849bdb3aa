// Claude Code (>= 2.1.29) puts a billing line at the top of its system prompt:
//
//   x-anthropic-billing-header: cc_version=2.1.197.3d9; cc_entrypoint=cli; cch=eb6c6;
//
// `cch` (a 5-hex hash of the request) and the 3-hex suffix of `cc_version` change on every
// request, so the prompt would differ from the previous turn within its first tokens and no
// prefix state could be reused. normalize_billing_header() rewrites every such line to keep
// only what is stable within a session:
//
//   x-anthropic-billing-header: cc_version=2.1.197; cc_entrypoint=cli;
//
// Exactly: on a line that starts with "x-anthropic-billing-header:", each "key=value;" field
// named `cch` is removed, and a `cc_version` value keeps only its leading dot-separated
// all-digit components (the semantic version). Other fields, other lines and text without the
// header are returned unchanged.
#pragma once

#include <string>
#include <string_view>

namespace hibana::server {

std::string normalize_billing_header(std::string_view text);

}  // namespace hibana::server
