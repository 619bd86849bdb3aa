#include "tokenizer/parsers/reasoning_splitter.h"

#include "tokenizer/parsers/text_scan.h"

namespace hibana::parsers {

namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
constexpr std::string_view kToolCall = "<tool_call>";
}  // namespace

ReasoningSplitter::ReasoningSplitter(bool in_reasoning, bool tool_calls)
    : mode_(in_reasoning ? Mode::start : Mode::content), tool_calls_(tool_calls) {}

Split ReasoningSplitter::push(std::string_view text) {
  Split out;
  buffer_.append(text);
  scan(out, false);
  return out;
}

Split ReasoningSplitter::finish() {
  Split out;
  scan(out, true);
  if (mode_ == Mode::content) {
    emit_content(out, buffer_);
  } else {
    emit_reasoning(out, buffer_, true);  // no </think>: the output was cut off while thinking
  }
  buffer_.clear();
  return out;
}

void ReasoningSplitter::emit_reasoning(Split& out, std::string text, bool closes) {
  if (!reasoning_started_) {
    size_t i = text.find_first_not_of('\n');
    text.erase(0, i == std::string::npos ? text.size() : i);
  }
  if (text.empty() && !closes) return;
  text.insert(0, held_newlines_);
  held_newlines_.clear();
  size_t end = text.find_last_not_of('\n');
  size_t keep = end == std::string::npos ? 0 : end + 1;
  if (!closes) held_newlines_ = text.substr(keep);
  text.resize(keep);
  if (!text.empty()) reasoning_started_ = true;
  out.reasoning += text;
}

void ReasoningSplitter::emit_content(Split& out, std::string_view text) {
  if (strip_content_newlines_) {
    size_t i = text.find_first_not_of('\n');
    if (i == std::string_view::npos) return;
    text.remove_prefix(i);
    strip_content_newlines_ = false;
  }
  out.content.append(text);
}

void ReasoningSplitter::scan(Split& out, bool final) {
  while (true) {
    if (mode_ == Mode::start) {
      size_t i = skip_spaces(buffer_);
      std::string_view rest = std::string_view(buffer_).substr(i);
      if (rest.substr(0, kOpen.size()) == kOpen) {
        buffer_.erase(0, i + kOpen.size());
      } else if (!final && rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) {
        return;  // may still become <think>
      }
      mode_ = Mode::reasoning;
    }
    if (mode_ == Mode::content) {
      emit_content(out, buffer_);
      buffer_.clear();
      return;
    }
    // Reasoning: look for </think>, or a <tool_call> that opens a real call.
    size_t close = buffer_.find(kClose);
    size_t call = tool_calls_ ? buffer_.find(kToolCall) : std::string::npos;
    while (call != std::string::npos && call < close) {
      std::string_view after = std::string_view(buffer_).substr(call + kToolCall.size());
      std::string_view body = after.substr(skip_spaces(after));
      bool opens = body.substr(0, 10) == "<function=" || (!body.empty() && body[0] == '{');
      bool undecided = !final && (body.empty() || could_become(body, "<function="));
      if (opens) break;
      if (undecided) {
        emit_reasoning(out, buffer_.substr(0, call), false);
        buffer_.erase(0, call);
        return;
      }
      call = buffer_.find(kToolCall, call + 1);
    }
    if (call != std::string::npos && call < close) {
      emit_reasoning(out, buffer_.substr(0, call), true);
      buffer_.erase(0, call);
      mode_ = Mode::content;
      continue;
    }
    if (close != std::string::npos) {
      emit_reasoning(out, buffer_.substr(0, close), true);
      buffer_.erase(0, close + kClose.size());
      mode_ = Mode::content;
      strip_content_newlines_ = true;
      continue;
    }
    if (final) return;
    size_t hold = tool_calls_ ? partial_tag_start(buffer_, {kClose, kToolCall})
                              : partial_tag_start(buffer_, {kClose});
    emit_reasoning(out, buffer_.substr(0, hold), false);
    buffer_.erase(0, hold);
    return;
  }
}

}  // namespace hibana::parsers
