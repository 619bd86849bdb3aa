#include "engine/xml_call_recogniser.h"

#include <algorithm>
#include <string_view>

namespace hibana {

namespace {

enum Phase : uint8_t {
  kLiteral,    // matching kLiterals[lit]
  kToolName,   // after "<function="
  kBetween,    // expecting "<parameter=" or "</function>" (pos: 1 after the '<')
  kParamName,  // after "<parameter="
  kText,       // a text value
  kJson,       // a JSON value
  kChoice,     // a text value out of Param::choices (lo, hi, pos as for names)
  kDone,
};

enum Literal : uint8_t {
  kLitFunction,       // "<function=" -> kToolName
  kLitToolNl,         // "\n" after the tool name's '>' -> kBetween
  kLitParam,          // "<parameter=" -> kParamName
  kLitParamNl,        // "\n" after the parameter name's '>' -> the value
  kLitClose,          // "</parameter>\n" after a JSON value's '\n' -> kBetween
  kLitAfterClose,     // "\n" after a text value's "</parameter>" -> kBetween
  kLitFunctionClose,  // "</function>" -> kDone
};

constexpr std::string_view kLiterals[] = {"<function=",     "\n", "<parameter=", "\n",
                                          "</parameter>\n", "\n", "</function>"};
constexpr std::string_view kClose = "</parameter>";
constexpr std::string_view kStop = "</tool_call>";
constexpr uint32_t kTracked = 128;  // parameters whose use is tracked (State::used's bits)

// One byte of a search for `pattern` (whose first byte occurs nowhere else in it).
uint8_t match(std::string_view pattern, uint8_t pos, char c) {
  if (c == pattern[pos]) return static_cast<uint8_t>(pos + 1);
  return c == pattern[0] ? 1 : 0;
}

}  // namespace

XmlCallRecogniser::XmlCallRecogniser(std::shared_ptr<const XmlCallSpec> spec)
    : spec_(std::move(spec)) {
  const auto& tools = spec_->tools;
  for (uint32_t t = 0; t < tools.size(); ++t) tools_sorted_.push_back(t);
  std::sort(tools_sorted_.begin(), tools_sorted_.end(),
            [&](uint32_t a, uint32_t b) { return tools[a].name < tools[b].name; });
  for (const XmlToolSpec& tool : tools) {
    Tool t;
    const auto& params = tool.params;
    for (uint32_t p = 0; p < params.size(); ++p) {
      t.sorted.push_back(p);
      if (params[p].text) {
        t.recogniser.push_back(-1);
      } else {
        t.recogniser.push_back(static_cast<int32_t>(json_.size()));
        json_.emplace_back(tool.schema, params[p].node);
      }
    }
    std::sort(t.sorted.begin(), t.sorted.end(),
              [&](uint32_t a, uint32_t b) { return params[a].name < params[b].name; });
    // Required parameters take the first bits, so that they are tracked whatever their number.
    t.bit.assign(params.size(), 0);
    uint32_t next = 0;
    for (int required = 1; required >= 0; --required) {
      for (uint32_t p = 0; p < params.size(); ++p) {
        if (params[p].required == static_cast<bool>(required)) t.bit[p] = next++;
      }
    }
    tools_.push_back(std::move(t));
  }
  if (spec_->named) {
    state_.phase = kBetween;
  } else {
    state_.phase = kLiteral;
    state_.lit = kLitFunction;
  }
}

bool XmlCallRecogniser::feed(char c) {
  State s = state_;
  if (!advance(s, c)) return false;
  state_ = s;
  return true;
}

bool XmlCallRecogniser::feed(const std::string& bytes) {
  State s = state_;
  for (char c : bytes) {
    if (!advance(s, c)) return false;
  }
  state_ = s;
  return true;
}

bool XmlCallRecogniser::complete() const {
  return state_.phase == kDone;
}

bool XmlCallRecogniser::used(const State& s, uint32_t param) const {
  const uint32_t bit = tools_[s.tool].bit[param];
  return bit < kTracked && ((s.used[bit / 64] >> (bit % 64)) & 1);
}

bool XmlCallRecogniser::missing_required(const State& s) const {
  const auto& params = spec_->tools[s.tool].params;
  for (uint32_t p = 0; p < params.size(); ++p) {
    if (params[p].required && tools_[s.tool].bit[p] < kTracked && !used(s, p)) return true;
  }
  return false;
}

bool XmlCallRecogniser::start_value(State& s) {
  const int32_t r = tools_[s.tool].recogniser[s.param];
  const auto& choices = spec_->tools[s.tool].params[s.param].choices;
  if (r < 0 && !choices.empty()) {
    s.phase = kChoice;
    s.lo = 0;
    s.hi = static_cast<uint16_t>(choices.size());
    s.pos = 0;
    return true;
  }
  s.phase = r < 0 ? kText : kJson;
  s.close = s.stop = 0;
  s.after_nl = true;  // the "\n" after the name: "</parameter>" may follow at once
  if (r >= 0) s.json = json_[static_cast<size_t>(r)].state();
  return true;
}

// One byte of a tool's or a parameter's name: the candidates narrow to the names that go on
// with it; '>' ends the name when it is one of them (a parameter not written yet).
bool XmlCallRecogniser::name_byte(State& s, char c, bool tool) {
  auto name = [&](uint32_t i) -> const std::string& {
    return tool ? spec_->tools[tools_sorted_[i]].name
                : spec_->tools[s.tool].params[tools_[s.tool].sorted[i]].name;
  };
  auto open = [&](uint32_t i) { return tool || !used(s, tools_[s.tool].sorted[i]); };
  if (c == '>') {
    for (uint32_t i = s.lo; i < s.hi; ++i) {
      if (name(i).size() != s.pos || !open(i)) continue;
      if (tool) {
        s.tool = static_cast<uint16_t>(tools_sorted_[i]);
        s.lit = kLitToolNl;
      } else {
        const uint32_t p = tools_[s.tool].sorted[i];
        s.param = static_cast<uint16_t>(p);
        const uint32_t bit = tools_[s.tool].bit[p];
        if (bit < kTracked) s.used[bit / 64] |= uint64_t(1) << (bit % 64);
        s.lit = kLitParamNl;
      }
      s.phase = kLiteral;
      s.pos = 0;
      return true;
    }
    return false;
  }
  uint32_t lo = s.hi, hi = s.lo;
  bool any_open = false;
  for (uint32_t i = s.lo; i < s.hi; ++i) {
    const std::string& n = name(i);
    if (n.size() <= s.pos || n[s.pos] != c) continue;
    lo = std::min(lo, i);
    hi = std::max(hi, i + 1);
    any_open = any_open || open(i);
  }
  if (!any_open) return false;
  s.lo = static_cast<uint16_t>(lo);
  s.hi = static_cast<uint16_t>(hi);
  ++s.pos;
  return true;
}

// One byte of a text value out of a list: '\n' ends it when it is one of them.
bool XmlCallRecogniser::choice_byte(State& s, char c) {
  const auto& choices = spec_->tools[s.tool].params[s.param].choices;
  if (c == '\n') {
    for (uint32_t i = s.lo; i < s.hi; ++i) {
      if (choices[i].size() != s.pos) continue;
      s.phase = kLiteral;
      s.lit = kLitClose;
      s.pos = 0;
      return true;
    }
    return false;
  }
  uint32_t lo = s.hi, hi = s.lo;
  for (uint32_t i = s.lo; i < s.hi; ++i) {
    if (choices[i].size() <= s.pos || choices[i][s.pos] != c) continue;
    lo = std::min(lo, i);
    hi = std::max(hi, i + 1);
  }
  if (lo >= hi) return false;
  s.lo = static_cast<uint16_t>(lo);
  s.hi = static_cast<uint16_t>(hi);
  ++s.pos;
  return true;
}

bool XmlCallRecogniser::value_byte(State& s, char c) {
  s.stop = match(kStop, s.stop, c);
  if (s.stop == kStop.size()) return false;
  if (s.phase == kText) {
    if (c == kClose[s.close]) {
      if (s.close == 0) s.close_nl = s.after_nl;
      ++s.close;
    } else if (c == kClose[0]) {
      s.close_nl = s.after_nl;
      s.close = 1;
    } else {
      s.close = 0;
    }
    s.after_nl = c == '\n';
    if (s.close < kClose.size()) return true;
    if (!s.close_nl) return false;  // "</parameter>" inside the text would end it early
    s.phase = kLiteral;
    s.lit = kLitAfterClose;
    s.pos = 0;
    return true;
  }
  JsonRecogniser& r = json_[static_cast<size_t>(tools_[s.tool].recogniser[s.param])];
  s.close = match(kClose, s.close, c);
  if (s.close == kClose.size()) return false;
  JsonRecogniser::State j = s.json;
  if (r.advance(j, c)) {
    s.json = j;
    return true;
  }
  // The '\n' before "</parameter>" ends the value (and a number at the top level with it).
  if (c != '\n') return false;
  j = s.json;
  if (!r.end(j)) return false;
  s.json = j;
  s.phase = kLiteral;
  s.lit = kLitClose;
  s.pos = 0;
  return true;
}

bool XmlCallRecogniser::advance(State& s, char c) {
  switch (s.phase) {
    case kLiteral: {
      const std::string_view lit = kLiterals[s.lit];
      if (c != lit[s.pos]) return false;
      if (++s.pos < lit.size()) return true;
      s.pos = 0;
      switch (s.lit) {
        case kLitFunction:
          s.phase = kToolName;
          s.lo = 0;
          s.hi = static_cast<uint16_t>(tools_sorted_.size());
          return true;
        case kLitParam:
          s.phase = kParamName;
          s.lo = 0;
          s.hi = static_cast<uint16_t>(tools_[s.tool].sorted.size());
          return true;
        case kLitParamNl:
          return start_value(s);
        case kLitFunctionClose:
          s.phase = kDone;
          return true;
        default:  // kLitToolNl, kLitClose, kLitAfterClose
          s.phase = kBetween;
          return true;
      }
    }
    case kToolName:
      return name_byte(s, c, true);
    case kParamName:
      return name_byte(s, c, false);
    case kBetween:
      if (s.pos == 0) {
        if (c != '<') return false;
        s.pos = 1;
        return true;
      }
      if (c == 'p') {
        bool open = false;
        for (uint32_t p = 0; p < spec_->tools[s.tool].params.size() && !open; ++p) {
          open = !used(s, p);
        }
        if (!open) return false;
        s.lit = kLitParam;
      } else if (c == '/') {
        if (missing_required(s)) return false;
        s.lit = kLitFunctionClose;
      } else {
        return false;
      }
      s.phase = kLiteral;
      s.pos = 2;
      return true;
    case kText:
    case kJson:
      return value_byte(s, c);
    case kChoice:
      return choice_byte(s, c);
    default:
      return false;  // kDone: one call, nothing after it
  }
}

bool XmlCallRecogniser::inert(const State& s, char c) {
  if (s.close != 0 || s.stop != 0 || c == '<' || c == '\n') return false;
  if (s.phase == kText) return !s.after_nl;
  return s.phase == kJson && JsonRecogniser::inert(s.json, c);
}

uint8_t XmlCallRecogniser::open_class(const State& s) {
  if (s.close != 0 || s.stop != 0) return 0;
  if (s.phase == kText) return s.after_nl ? 0 : TokenTrie::kXmlTextByte;
  return s.phase == kJson && JsonRecogniser::inert_class(s.json) ? TokenTrie::kXmlJsonStringByte
                                                                 : 0;
}

std::string XmlCallRecogniser::closing() const {
  XmlCallRecogniser r = *this;
  std::string out;
  auto add = [&](const std::string& text) {
    if (!r.feed(text)) return false;
    out += text;
    return true;
  };
  for (int guard = 0; guard < 4096 && r.state_.phase != kDone; ++guard) {
    const State s = r.state_;
    bool ok = false;
    switch (s.phase) {
      case kLiteral:
        ok = add(std::string(kLiterals[s.lit].substr(s.pos)));
        break;
      case kToolName:
        for (uint32_t i = s.lo; i < s.hi && !ok; ++i) {
          const std::string& n = spec_->tools[tools_sorted_[i]].name;
          ok = n.size() >= s.pos && add(n.substr(s.pos) + ">");
        }
        break;
      case kBetween: {
        const std::string next = missing_required(s) ? "<parameter=" : "</function>";
        ok = add(next.substr(s.pos));
        break;
      }
      case kParamName: {
        // A required parameter first, else any that fits the name so far.
        const auto& params = spec_->tools[s.tool].params;
        for (int required = 1; required >= 0 && !ok; --required) {
          for (uint32_t i = s.lo; i < s.hi && !ok; ++i) {
            const uint32_t p = tools_[s.tool].sorted[i];
            if (required && !params[p].required) continue;
            const std::string& n = params[p].name;
            ok = n.size() >= s.pos && !r.used(s, p) && add(n.substr(s.pos) + ">");
          }
        }
        break;
      }
      case kText:
        ok = add("\n</parameter>");
        break;
      case kChoice: {
        const auto& choices = spec_->tools[s.tool].params[s.param].choices;
        ok = add(choices[s.lo].substr(s.pos) + "\n");  // the shortest that goes on like this
        break;
      }
      case kJson: {
        const JsonRecogniser& j = r.json_[static_cast<size_t>(tools_[s.tool].recogniser[s.param])];
        const std::string rest = j.closing(s.json) + "\n";
        ok = add(rest);
        if (!ok) {
          // No schema-valid way on (an unsatisfiable schema): close the syntax all the same.
          out += rest;
          r.state_.phase = kLiteral;
          r.state_.lit = kLitClose;
          r.state_.pos = 0;
          ok = true;
        }
        break;
      }
      default:
        break;
    }
    if (!ok) break;
  }
  return out;
}

}  // namespace hibana
