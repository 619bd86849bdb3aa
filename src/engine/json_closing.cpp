// JsonRecogniser::closing(): completes a document when generation stops early, one step at a
// time on a copy of the recogniser, guided by its first live branch; every step is fed through
// the recogniser, so what comes out is valid for the schema. When the schema leaves no way on,
// a second pass forgets it and only closes the syntax.
#include <string>

#include "engine/json_recogniser.h"

namespace hibana {

namespace {
// "_<i><tail>", or just tail for i == 0: names for new keys.
std::string numbered(int i, const char* tail) {
  std::string s;
  if (i > 0) {
    s += '_';
    s += std::to_string(i);
  }
  s += tail;
  return s;
}
}  // namespace

class JsonCloser {
 public:
  explicit JsonCloser(const JsonRecogniser& r) : r_(r) {}

  std::string run() {
    for (int pass = 0; pass < 2 && !r_.complete(); ++pass) {
      if (pass == 1) r_.relax();
      for (int guard = 0; !r_.complete() && guard < 4096; ++guard) {
        if (!step()) break;
      }
    }
    return out_;
  }

 private:
  using S = JsonRecogniser::S;
  using Branch = JsonRecogniser::Branch;

  bool add(const std::string& s) {
    if (s.empty() || !r_.feed(s)) return false;
    out_ += s;
    return true;
  }
  const JsonRecogniser::State& st() const { return r_.state_; }
  bool normal(const Branch& b) const { return b.mode == JsonRecogniser::kNormal; }
  bool seen(const std::string& key) const { return r_.seen(st(), key); }

  std::string missing_required(const Branch& b) const {
    for (const std::string& r : r_.node(b.top).required) {
      if (!seen(r)) return r;
    }
    return {};
  }

  bool step() {
    static constexpr const char* kWords[] = {"true", "false", "null"};
    // Copies: add() may grow the pools that references would point into.
    const JsonRecogniser::State s = st();
    const Branch b = r_.branch(s, 0);
    if (b.mode == JsonRecogniser::kLiteral) {
      const std::string& t = r_.node(b.node).literals[b.lo];
      if (b.pos < t.size() && add(t.substr(b.pos))) return true;
    }
    switch (s.s) {
      case S::string:
        return s.in_key ? finish_key(b) : add("\"");
      case S::escape:
        return add("n");
      case S::unicode:
        return add(std::string(s.hex_left, '0'));
      case S::number:
        if (!(s.num == 1 || s.num == 2 || s.num == 4 || s.num == 7)) return add("0");
        // At the top level a number never ends; elsewhere what follows it ends it.
        return s.depth > 0 && (after_value(s, b, r_.in_object(s)) || add(" "));
      case S::literal:
        return add(kWords[s.word] + s.word_pos);
      case S::obj_colon:
        return add(":");
      case S::value:
        return value(s, b);
      case S::obj_key:
        if (normal(b)) {
          const std::string m = missing_required(b);
          if (!m.empty() && add("\"" + m + "\":")) return true;
        }
        if (s.empty && add("}")) return true;
        return new_key(b);
      case S::obj_next:
      case S::arr_next:
        return after_value(s, b, s.s == S::obj_next);
      case S::done:
        return false;
    }
    return false;
  }

  // After a member or an element: ',' while required keys or minItems items are missing.
  bool after_value(const JsonRecogniser::State&, const Branch& b, bool object) {
    if (object) {
      if (normal(b) && !missing_required(b).empty()) return add(",") || add("}");
      return add("}") || add(",");
    }
    if (normal(b) && b.count < r_.node(b.top).min_items) return add(",") || add("]");
    return add("]") || add(",");
  }

  bool value(const JsonRecogniser::State& s, const Branch& b) {
    if (s.empty && s.depth > 0 && !r_.in_object(s) &&
        (!normal(b) || b.count >= r_.node(b.top).min_items) && add("]")) {
      return true;
    }
    for (uint32_t i = 0; i < s.nbranches; ++i) {
      const Branch x = r_.branch(s, i);
      if (add(normal(x) ? r_.schema_->minimal_text(x.node) : "null")) return true;
    }
    for (const char* v : {"{}", "null", "0", "\"\"", "[]", "false"}) {
      if (add(v)) return true;
    }
    return false;
  }

  // After '{' or ',' with every required key written: a declared key, else a new one.
  bool new_key(const Branch& b) {
    if (normal(b)) {
      for (const auto& p : r_.node(b.top).properties) {
        if (p.node != JsonSchema::kNever && !seen(p.name) && add("\"" + p.name + "\":")) {
          return true;
        }
      }
    }
    for (int i = 0; i < 100; ++i) {
      std::string key = "\"";
      key += numbered(i, "\":");
      if (add(key)) return true;
    }
    return false;
  }

  // Inside a key: finish a declared key it is the start of (required ones first), else end it.
  bool finish_key(const Branch& b) {
    const std::string prefix(r_.key_text(st()));
    if (normal(b)) {
      const JsonSchema::Node& t = r_.node(b.top);
      auto rest = [&](const std::string& name) {
        return name.size() >= prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
               !seen(name) && add(name.substr(prefix.size()) + "\"");
      };
      for (const std::string& r : t.required) {
        if (rest(r)) return true;
      }
      for (const auto& p : t.properties) {
        if (p.node != JsonSchema::kNever && rest(p.name)) return true;
      }
    }
    if (add("\"")) return true;
    for (int i = 1; i < 100; ++i) {
      if (add(numbered(i, "\""))) return true;
    }
    return false;
  }

  JsonRecogniser r_;
  std::string out_;
};

std::string JsonRecogniser::closing() const {
  return JsonCloser(*this).run();
}

}  // namespace hibana
