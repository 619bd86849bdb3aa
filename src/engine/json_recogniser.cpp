#include "engine/json_recogniser.h"

#include <algorithm>

namespace hibana {

namespace {

constexpr uint32_t kMark = UINT32_MAX;  // a Key record that opens an object
constexpr const char* kWords[] = {"true", "false", "null"};

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool number_byte(char c) {
  return is_digit(c) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-';
}

// Writes v at pool[len] (past every live state's part of the pool: what was there belongs to
// an abandoned probe) and returns its index.
template <typename Pool, typename T>
uint32_t append(Pool& pool, uint32_t& len, const T& v) {
  if (len < pool.size()) {
    pool[len] = v;
  } else {
    pool.push_back(v);
  }
  return len++;
}

}  // namespace

// Writes a new branch list after every list in use (the old one may belong to the committed
// state or to a probe's parent), then makes it the state's list.
class JsonRecogniser::Edit {
 public:
  Edit(JsonRecogniser& r, State& st) : r_(r), st_(st), src_(st.branches), n_(st.nbranches) {
    r_.branches_.resize(st.branches_len);
    out_ = st.branches_len;
  }
  uint32_t size() const { return n_; }
  Branch get(uint32_t i) const { return r_.branches_[src_ + i]; }
  void push(const Branch& b) { r_.branches_.push_back(b); }
  bool commit(bool dedupe) {
    auto& v = r_.branches_;
    uint32_t end = static_cast<uint32_t>(v.size());
    if (dedupe && end - out_ > 1) {
      uint32_t kept = out_;
      for (uint32_t i = out_; i < end; ++i) {
        bool dup = false;
        for (uint32_t j = out_; j < kept && !dup; ++j) dup = v[j] == v[i];
        if (!dup) v[kept++] = v[i];
      }
      end = kept;
      v.resize(end);
    }
    st_.branches = out_;
    st_.nbranches = end - out_;
    st_.branches_len = end;
    uint16_t literals = 0;
    for (uint32_t i = out_; i < end; ++i) literals += v[i].mode == kLiteral;
    st_.literals = literals;
    return end > out_;
  }

 private:
  JsonRecogniser& r_;
  State& st_;
  uint32_t src_, n_, out_;
};

JsonRecogniser::JsonRecogniser(bool object_only, int max_depth)
    : JsonRecogniser(JsonSchema::any(object_only), max_depth) {}

JsonRecogniser::JsonRecogniser(std::shared_ptr<const JsonSchema> schema, int max_depth)
    : JsonRecogniser(schema ? schema : JsonSchema::any(false), JsonSchema::kNoNode, max_depth) {}

JsonRecogniser::JsonRecogniser(std::shared_ptr<const JsonSchema> schema, uint32_t start,
                               int max_depth)
    : schema_(schema ? std::move(schema) : JsonSchema::any(false)),
      max_depth_(std::clamp(max_depth, 1, 64)) {
  Branch root;
  root.node = start == JsonSchema::kNoNode ? schema_->root() : start;
  append(branches_, state_.branches_len, root);
  state_.nbranches = 1;
}

bool JsonRecogniser::feed(char c) {
  State s = state_;
  if (!step(s, c)) return false;
  state_ = s;
  return true;
}

bool JsonRecogniser::feed(const std::string& bytes) {
  State s = state_;
  for (char c : bytes) {
    if (!step(s, c)) return false;
  }
  state_ = s;
  return true;
}

bool JsonRecogniser::end(State& s) {
  if (s.s == S::number && s.depth == 0 && (s.num == 1 || s.num == 2 || s.num == 4 || s.num == 7)) {
    return end_value(s);
  }
  return s.done;
}

std::string JsonRecogniser::closing(const State& s) const {
  JsonRecogniser copy = *this;
  copy.state_ = s;
  return copy.closing();
}

std::string_view JsonRecogniser::key_text(const State& st) const {
  return std::string_view(chars_.data() + st.key_start, st.chars_len - st.key_start);
}

bool JsonRecogniser::seen(const State& st, std::string_view key) const {
  for (int32_t k = st.keys; k >= 0 && keys_[k].len != kMark; k = keys_[k].prev) {
    if (std::string_view(chars_.data() + keys_[k].off, keys_[k].len) == key) return true;
  }
  return false;
}

// Whether a key starting with `prefix` can still be finished in this object: a declared key
// not written yet, or (when other keys are allowed) a key without escapes, unless the object
// declares no keys at all.
bool JsonRecogniser::key_allowed(const State& st, const JsonSchema::Node& obj,
                                 std::string_view prefix) const {
  if (obj.additional != JsonSchema::kNever &&
      (obj.properties.empty() || prefix.find('\\') == std::string_view::npos)) {
    return true;
  }
  for (auto it = JsonSchema::first_with_prefix(obj, prefix);
       it != obj.properties.end() && std::string_view(it->name).substr(0, prefix.size()) == prefix;
       ++it) {
    if (it->node != JsonSchema::kNever && !seen(st, it->name)) return true;
  }
  return false;
}

// Drops the normal branches that `keep` rejects; writes a new list only when one is dropped.
template <typename Keep>
bool JsonRecogniser::filter(State& st, Keep keep) {
  uint32_t dropped = 0;
  for (uint32_t i = 0; i < st.nbranches; ++i) {
    const Branch& b = branch(st, i);
    dropped += b.mode == kNormal && !keep(b);
  }
  if (dropped == 0) return true;
  if (dropped == st.nbranches) return false;
  Edit e(*this, st);
  for (uint32_t i = 0; i < e.size(); ++i) {
    Branch b = e.get(i);
    if (b.mode != kNormal || keep(b)) e.push(b);
  }
  return e.commit(false);
}

bool JsonRecogniser::step(State& st, char c) {
  if (st.s == S::number && !number_byte(c)) {
    // The byte that ends a number belongs to what follows.
    if (!(st.num == 1 || st.num == 2 || st.num == 4 || st.num == 7)) return false;
    if (!end_value(st)) return false;
    return step(st, c);
  }
  // Between tokens at most one whitespace byte in a row: a weak model would otherwise fill its
  // whole budget with spaces, which stay valid JSON forever.
  if (st.s != S::string && st.s != S::escape && st.s != S::unicode && st.s != S::number &&
      st.s != S::literal) {
    if (is_ws(c)) {
      if (st.ws_run >= 1) return false;
      ++st.ws_run;
    } else {
      st.ws_run = 0;
    }
  }
  if (st.literals > 0 && !match_literals(st, c)) return false;
  switch (st.s) {
    case S::done:
      return false;  // one document, nothing after it
    case S::value:
      if (is_ws(c)) return true;
      if (c == ']' && st.empty && st.depth > 0 && !in_object(st)) return close(st, false);
      return begin_value(st, c);
    case S::obj_key:
      if (is_ws(c)) return true;
      if (c == '"') {
        if (!open_key(st)) return false;
        st.s = S::string;
        st.in_key = true;
        st.empty = false;
        st.key_start = st.chars_len;
        return true;
      }
      if (c == '}' && st.empty) return close(st, true);
      return false;
    case S::obj_colon:
      if (is_ws(c)) return true;
      if (c != ':') return false;
      st.s = S::value;
      st.empty = false;
      return true;
    case S::obj_next:
    case S::arr_next: {
      if (is_ws(c)) return true;
      const bool obj = st.s == S::obj_next;
      if (c == ',') {
        if (!next_member(st, obj)) return false;
        st.s = obj ? S::obj_key : S::value;
        st.empty = false;
        return true;
      }
      if (c == (obj ? '}' : ']')) return close(st, obj);
      return false;
    }
    case S::string:
      if (c == '"') return st.in_key ? close_key(st) : end_value(st);
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\') st.s = S::escape;
      return !st.in_key || key_byte(st, c);
    case S::escape:
      if (c == 'u') {
        st.s = S::unicode;
        st.hex_left = 4;
      } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                 c == 'r' || c == 't') {
        st.s = S::string;
      } else {
        return false;
      }
      return !st.in_key || key_byte(st, c);
    case S::unicode:
      if (!is_hex(c)) return false;
      if (--st.hex_left == 0) st.s = S::string;
      return !st.in_key || key_byte(st, c);
    case S::number:
      if (is_digit(c)) {
        // Numbers stay what the server can pass on exactly: at most 18 integer digits (an int64
        // keeps them; longer ones came back as doubles), 20 fraction and 3 exponent digits.
        const int most = st.num <= 2 ? 18 : st.num <= 4 ? 20 : 3;
        if (++st.digits > most) return false;
        switch (st.num) {
          case 0:
            st.num = c == '0' ? 1 : 2;
            return true;
          case 1:
            return false;  // no leading zeros
          case 3:
            st.num = 4;
            return true;
          case 5:
          case 6:
            st.num = 7;
            return true;
          default:
            return true;  // 2, 4, 7 keep reading digits
        }
      }
      if (c == '.') {
        if (st.num != 1 && st.num != 2) return false;
        st.num = 3;
        st.digits = 0;
        return fraction(st);
      }
      if (c == 'e' || c == 'E') {
        if (st.num != 1 && st.num != 2 && st.num != 4) return false;
        st.num = 5;
        st.digits = 0;
        return fraction(st);
      }
      if (st.num != 5) return false;  // '+' or '-'
      st.num = 6;
      return true;
    case S::literal:
      if (c != kWords[st.word][st.word_pos]) return false;
      if (kWords[st.word][++st.word_pos] == '\0') return end_value(st);
      return true;
  }
  return false;
}

bool JsonRecogniser::begin_value(State& st, char c) {
  uint8_t types;
  if (c == '{') {
    types = JsonSchema::kObject;
  } else if (c == '[') {
    types = JsonSchema::kArray;
  } else if (c == '"') {
    types = JsonSchema::kString;
  } else if (c == '-' || is_digit(c)) {
    types = JsonSchema::kInteger | JsonSchema::kFraction;
  } else if (c == 't' || c == 'f') {
    types = JsonSchema::kBoolean;
  } else if (c == 'n') {
    types = JsonSchema::kNull;
  } else {
    return false;
  }
  const bool container = c == '{' || c == '[';
  if (container && st.depth >= max_depth_) return false;
  if (!fork(st, c, types)) return false;
  st.empty = false;
  if (container) {
    if (c == '{') {
      st.objects |= uint64_t(1) << st.depth;
      st.keys = static_cast<int32_t>(append(keys_, st.keys_len, Key{st.keys, 0, kMark}));
    } else {
      st.objects &= ~(uint64_t(1) << st.depth);
    }
    ++st.depth;
    st.s = c == '{' ? S::obj_key : S::value;
    st.empty = true;
  } else if (c == '"') {
    st.s = S::string;
    st.in_key = false;
  } else if (types & JsonSchema::kInteger) {
    st.s = S::number;
    st.num = c == '-' ? 0 : (c == '0' ? 1 : 2);
    st.digits = c == '-' ? 0 : 1;
  } else {
    st.word = c == 't' ? 0 : c == 'f' ? 1 : 2;
    st.word_pos = 1;
    st.s = S::literal;
  }
  return true;
}

// A value starts with byte c: each normal branch becomes one branch per alternative of its
// expected node that accepts c (a type, an enum text starting with c).
bool JsonRecogniser::fork(State& st, char c, uint8_t types) {
  const bool element = st.depth > 0 && !in_object(st);
  Edit e(*this, st);
  for (uint32_t i = 0; i < e.size(); ++i) {
    Branch b = e.get(i);
    if (b.mode != kNormal) {
      e.push(b);
      continue;
    }
    if (element && ++b.count > node(b.top).max_items) continue;
    if (b.node == JsonSchema::kNoNode) continue;
    const JsonSchema::Node& expected = node(b.node);
    const size_t n = expected.alternatives.empty() ? 1 : expected.alternatives.size();
    for (size_t a = 0; a < n; ++a) {
      const uint32_t id = expected.alternatives.empty() ? b.node : expected.alternatives[a];
      const JsonSchema::Node& leaf = node(id);
      if (!(leaf.types & types)) continue;
      Branch nb = b;
      if (leaf.has_literals) {
        const std::string first(1, c), next(1, static_cast<char>(c + 1));
        auto lo = std::lower_bound(leaf.literals.begin(), leaf.literals.end(), first);
        auto hi = std::lower_bound(lo, leaf.literals.end(), next);
        if (lo == hi) continue;
        nb.mode = kLiteral;
        nb.node = id;
        nb.lo = static_cast<uint32_t>(lo - leaf.literals.begin());
        nb.hi = static_cast<uint32_t>(hi - leaf.literals.begin());
        nb.pos = 1;
        nb.hold = st.depth;
      } else if (leaf.free) {
        nb.mode = kFree;
        nb.hold = st.depth;
      } else if (c == '{' || c == '[') {
        nb.parent =
            static_cast<int32_t>(append(frames_, st.frames_len, Frame{b.parent, b.top, b.count}));
        nb.top = id;
        nb.count = 0;
        nb.node = c == '[' ? leaf.items : JsonSchema::kNoNode;
      } else {
        nb.node = id;
      }
      e.push(nb);
    }
  }
  return e.commit(true);
}

// A value ended (the syntax is back at the level that holds it): literals must be complete,
// and the branches reading it move on to their container's next member.
bool JsonRecogniser::end_value(State& st) {
  const bool member = in_object(st);
  Edit e(*this, st);
  for (uint32_t i = 0; i < e.size(); ++i) {
    Branch b = e.get(i);
    if (b.mode != kNormal) {
      if (b.hold != st.depth) {  // a value inside the literal / free one
        e.push(b);
        continue;
      }
      if (b.mode == kLiteral && node(b.node).literals[b.lo].size() != b.pos) continue;
      b.mode = kNormal;
      b.lo = b.hi = b.pos = 0;
    }
    if (member) {
      ++b.count;
      b.node = JsonSchema::kNoNode;
    } else if (st.depth > 0) {
      b.node = node(b.top).items;
    }
    e.push(b);
  }
  if (!e.commit(true)) return false;
  if (st.depth == 0) {
    st.s = S::done;
    st.done = true;
  } else {
    st.s = member ? S::obj_next : S::arr_next;
  }
  st.empty = false;
  return true;
}

bool JsonRecogniser::close(State& st, bool object) {
  Edit e(*this, st);
  for (uint32_t i = 0; i < e.size(); ++i) {
    Branch b = e.get(i);
    if (b.mode == kNormal) {
      const JsonSchema::Node& t = node(b.top);
      if (object) {
        bool ok = true;
        for (size_t r = 0; r < t.required.size() && ok; ++r) ok = seen(st, t.required[r]);
        if (!ok) continue;
      } else if (b.count < t.min_items) {
        continue;
      }
      const Frame f = frames_[b.parent];
      b.parent = f.parent;
      b.top = f.top;
      b.count = f.count;
    }
    e.push(b);
  }
  if (!e.commit(false)) return false;
  if (object) {
    int32_t k = st.keys;
    while (keys_[k].len != kMark) k = keys_[k].prev;
    st.keys = keys_[k].prev;
  }
  --st.depth;
  return end_value(st);
}

bool JsonRecogniser::open_key(State& st) {
  if (!filter(st, [&](const Branch& b) {
        const JsonSchema::Node& t = node(b.top);
        return t.additional != JsonSchema::kNever || b.count < t.declared;
      })) {
    return false;
  }
  // Objects that declare no keys and take any others need no check per byte.
  st.plain_key = true;
  for (uint32_t i = 0; i < st.nbranches && st.plain_key; ++i) {
    const Branch& b = branch(st, i);
    if (b.mode != kNormal) continue;
    const JsonSchema::Node& t = node(b.top);
    st.plain_key = t.properties.empty() && t.additional != JsonSchema::kNever;
  }
  return true;
}

bool JsonRecogniser::key_byte(State& st, char c) {
  append(chars_, st.chars_len, c);
  if (st.plain_key) return true;
  const std::string_view prefix = key_text(st);
  return filter(st, [&](const Branch& b) { return key_allowed(st, node(b.top), prefix); });
}

bool JsonRecogniser::close_key(State& st) {
  const std::string_view key = key_text(st);
  if (seen(st, key)) return false;
  const bool escaped = key.find('\\') != std::string_view::npos;
  Edit e(*this, st);
  for (uint32_t i = 0; i < e.size(); ++i) {
    Branch b = e.get(i);
    if (b.mode == kNormal) {
      const JsonSchema::Node& t = node(b.top);
      if (const JsonSchema::Property* p = JsonSchema::find(t, key)) {
        b.node = p->node;
      } else if (!escaped || t.properties.empty()) {
        b.node = t.additional;
      } else {
        continue;
      }
      if (b.node == JsonSchema::kNever) continue;
    }
    e.push(b);
  }
  if (!e.commit(true)) return false;
  st.keys = static_cast<int32_t>(
      append(keys_, st.keys_len, Key{st.keys, st.key_start, st.chars_len - st.key_start}));
  st.in_key = false;
  st.s = S::obj_colon;
  return true;
}

bool JsonRecogniser::next_member(State& st, bool object) {
  return filter(st, [&](const Branch& b) {
    const JsonSchema::Node& t = node(b.top);
    if (object) return t.additional != JsonSchema::kNever || b.count < t.declared;
    return b.count < t.max_items;
  });
}

bool JsonRecogniser::fraction(State& st) {
  return filter(st,
                [&](const Branch& b) { return (node(b.node).types & JsonSchema::kFraction) != 0; });
}

bool JsonRecogniser::match_literals(State& st, char c) {
  Edit e(*this, st);
  const int key = static_cast<unsigned char>(c);
  for (uint32_t i = 0; i < e.size(); ++i) {
    Branch b = e.get(i);
    if (b.mode == kLiteral) {
      const auto& lits = node(b.node).literals;
      const uint32_t pos = b.pos;
      auto at = [pos](const std::string& s) {
        return s.size() > pos ? static_cast<int>(static_cast<unsigned char>(s[pos])) : -1;
      };
      auto first = lits.begin() + b.lo, last = lits.begin() + b.hi;
      auto lo =
          std::partition_point(first, last, [&](const std::string& s) { return at(s) < key; });
      auto hi = std::partition_point(lo, last, [&](const std::string& s) { return at(s) <= key; });
      if (lo == hi) continue;
      b.lo = static_cast<uint32_t>(lo - lits.begin());
      b.hi = static_cast<uint32_t>(hi - lits.begin());
      ++b.pos;
    }
    e.push(b);
  }
  return e.commit(false);
}

void JsonRecogniser::relax() {
  Branch b;
  if (state_.depth == 0 && state_.s == S::value) {
    b.node = JsonSchema::kAny;
  } else {
    b.mode = kFree;
    b.hold = 0;
  }
  branches_.resize(state_.branches_len);
  state_.branches = append(branches_, state_.branches_len, b);
  state_.nbranches = 1;
  state_.literals = 0;
}

}  // namespace hibana
