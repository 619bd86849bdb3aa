#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/utf8.h"

namespace hibana {

namespace {

// Unicode White_Space, which is what \s means to Oniguruma and Rust regex.
constexpr std::string_view kWhiteSpaceItems = R"(\t\n\x{0B}\f\r\x{85}\p{Z})";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string to_pcre2_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        if (in_class) {
          out.append(kWhiteSpaceItems);
        } else {
          out.append("[").append(kWhiteSpaceItems).append("]");
        }
      } else if (next == 'S' && !in_class) {
        out.append("[^").append(kWhiteSpaceItems).append("]");
      } else {
        out.push_back('\\');
        out.push_back(next);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      // A POSIX class like [:alpha:] inside a class: copy it whole.
      const size_t close = pattern.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(pattern.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

struct RegexSplitter::Scratch::State {
  pcre2_match_data* match = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~State() {
    pcre2_match_data_free(match);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

RegexSplitter::Scratch::~Scratch() = default;

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns, const std::string& source) {
  for (const std::string& original : patterns) {
    const std::string pattern = to_pcre2_pattern(original);
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (!compiled->code) {
      throw Error(ErrorKind::corrupt_data, source + ": pre-tokenizer regex '" + original +
                                               "' does not compile: " + pcre2_message(error) +
                                               " (at offset " + std::to_string(offset) + ")");
    }
    const int jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    compiled->jit = jit == 0;
    if (!compiled->jit) {
      log_warn(source, ": PCRE2 JIT unavailable (", pcre2_message(jit),
               "); tokenizing with the slower interpreter");
    }
    patterns_.push_back(std::move(compiled));
  }
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

bool RegexSplitter::empty() const {
  return patterns_.empty();
}

std::unique_ptr<RegexSplitter::Scratch> RegexSplitter::make_scratch() const {
  auto scratch = std::make_unique<Scratch>();
  for (const auto& compiled : patterns_) {
    auto state = std::make_unique<Scratch::State>();
    state->match = pcre2_match_data_create(1, nullptr);  // only the whole match is read
    state->context = pcre2_match_context_create(nullptr);
    // Long runs of one class (a page of CJK, a screen of spaces) need more than the default
    // 32 KiB JIT stack on some patterns.
    state->stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (!state->match || !state->context || !state->stack) {
      throw Error(ErrorKind::out_of_memory, "cannot allocate PCRE2 match state");
    }
    if (compiled->jit) pcre2_jit_stack_assign(state->context, nullptr, state->stack);
    scratch->states_.push_back(std::move(state));
  }
  return scratch;
}

namespace {

// Appends the pieces one regex cuts text[begin, end) into.
void split_one(pcre2_code* code, bool jit, pcre2_match_data* match, pcre2_match_context* context,
               std::string_view text, uint32_t begin, uint32_t end, std::vector<Piece>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
  const size_t length = end - begin;
  size_t start = 0;    // where the next search starts
  size_t emitted = 0;  // end of the last piece
  PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
  while (start < length) {
    const int rc =
        jit ? pcre2_jit_match(code, subject, length, start, 0, match, context)
            : pcre2_match(code, subject, length, start, PCRE2_NO_UTF_CHECK, match, context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw Error(ErrorKind::internal, "pre-tokenizer regex failed: " + pcre2_message(rc));
    }
    const size_t match_begin = ovector[0];
    const size_t match_end = ovector[1];
    if (match_begin > emitted) {
      out.push_back(
          {begin + static_cast<uint32_t>(emitted), begin + static_cast<uint32_t>(match_begin)});
    }
    if (match_end > match_begin) {
      out.push_back(
          {begin + static_cast<uint32_t>(match_begin), begin + static_cast<uint32_t>(match_end)});
      emitted = match_end;
      start = match_end;
    } else {
      // An empty match makes an empty piece, which tokenizers drops; step over one character.
      emitted = match_begin;
      if (match_begin >= length) break;
      start =
          match_begin + utf8::lead_length(static_cast<unsigned char>(text[begin + match_begin]));
    }
  }
  if (emitted < length) {
    out.push_back({begin + static_cast<uint32_t>(emitted), end});
  }
}

}  // namespace

void RegexSplitter::split(std::string_view text, Scratch& scratch, std::vector<Piece>& out) const {
  out.clear();
  if (text.empty()) return;
  if (patterns_.empty()) {
    out.push_back({0, static_cast<uint32_t>(text.size())});
    return;
  }
  check(text.size() < UINT32_MAX, ErrorKind::invalid_argument, "text too long to tokenize");
  for (size_t p = 0; p < patterns_.size(); ++p) {
    const Compiled& compiled = *patterns_[p];
    Scratch::State& state = *scratch.states_[p];
    if (p == 0) {
      split_one(compiled.code, compiled.jit, state.match, state.context, text, 0,
                static_cast<uint32_t>(text.size()), out);
      continue;
    }
    scratch.level_.swap(out);
    out.clear();
    for (const Piece& piece : scratch.level_) {
      split_one(compiled.code, compiled.jit, state.match, state.context, text, piece.begin,
                piece.end, out);
    }
  }
}

}  // namespace hibana
