// A byte-level recogniser for one JSON document that satisfies a JsonSchema: a pushdown
// machine for the syntax (shared by every reading of the text so far), plus "branches", the
// schema readings still alive. anyOf / oneOf fork a branch where a value starts; a branch dies
// at the first byte it cannot take (wrong type, an undeclared key, a '}' before the required
// keys, an enum value that does not go on like this...); a byte is accepted while any branch
// lives. Keys never repeat within an object; whitespace runs are capped at one byte so that a
// weak model cannot stall.
//
// All state lives in append-only pools and a small State value (about 64 bytes): probing a
// byte copies the State and appends past the pools' committed ends, so JsonConstraint can try
// every token of a vocabulary without copying or allocating per token.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_schema.h"
#include "engine/token_trie.h"

namespace hibana {

class JsonRecogniser {
 public:
  // Syntax only: any JSON value, or any object with object_only.
  explicit JsonRecogniser(bool object_only = true, int max_depth = 64);
  // A document valid for `schema` (null: any JSON value). max_depth is at most 64.
  explicit JsonRecogniser(std::shared_ptr<const JsonSchema> schema, int max_depth = 64);
  // A document valid for one node of `schema` (an XML tool call's parameter value).
  JsonRecogniser(std::shared_ptr<const JsonSchema> schema, uint32_t start, int max_depth = 64);

  // false (and the state unchanged) when a byte cannot continue a valid document.
  bool feed(char c);
  bool feed(const std::string& bytes);  // all or nothing
  bool complete() const { return state_.done; }
  // Bytes that complete the document when generation stops early (empty when complete()):
  // open strings, numbers and literals are finished, a literal (enum / const) value being
  // written is written out, missing required keys get minimal values (null, false, 0, "",
  // minItems items...), containers are closed. When the schema leaves no way to finish (an
  // unsatisfiable schema), the rest only closes the syntax: the result is then valid JSON but
  // not necessarily valid for the schema. A number at the top level never completes (it could
  // go on), so it gets nothing.
  std::string closing() const;

  enum class S : uint8_t {
    value,      // expecting a value (whitespace allowed)
    obj_key,    // after '{' or ',' in an object: expecting '"' (or '}' right after '{')
    obj_colon,  // after a key
    obj_next,   // after a member value: ',' or '}'
    arr_next,   // after an element: ',' or ']'
    string,     // inside a string
    escape,     // after '\'
    unicode,    // inside \uXXXX (hex_left digits to go)
    number,     // inside a number (num tracks the part)
    literal,    // inside true/false/null
    done,
  };

  // The probing interface (JsonConstraint): copy state(), advance() the copy byte by byte.
  // A copy is valid until the next advance() of a different copy that is not derived from it
  // (probes append to the pools past the committed state and overwrite each other there).
  struct State {
    S s = S::value;
    uint8_t num = 0;     // number part: 0 sign, 1 int-first-digit-0, 2 int, 3 dot, 4 frac, 5 e,
                         // 6 e-sign, 7 exp
    uint8_t digits = 0;  // digits so far in the number part being read
    uint8_t hex_left = 0;
    uint8_t word = 0;  // literal: 0 true, 1 false, 2 null
    uint8_t word_pos = 0;
    uint8_t ws_run = 0;   // whitespace bytes in a row outside strings
    uint8_t depth = 0;    // open containers
    bool in_key = false;  // the string being read is an object key
    bool empty = false;   // just after '{' or '[' (allows immediate close)
    bool done = false;
    bool plain_key = false;                // no branch checks the key being read byte by byte
    uint16_t literals = 0;                 // branches matching an enum / const text
    uint64_t objects = 0;                  // bit d: the container at depth d + 1 is an object
    int32_t keys = -1;                     // newest key record of the innermost object (-1: none)
    uint32_t key_start = 0;                // the key being read: chars [key_start, chars_len)
    uint32_t branches = 0, nbranches = 0;  // the live branches: a range of the branch pool
    uint32_t frames_len = 0, branches_len = 0, keys_len = 0, chars_len = 0;  // pools in use
  };
  const State& state() const { return state_; }
  bool advance(State& s, char c) { return step(s, c); }
  // Ends a number at the top level (which never ends by itself: it could go on) when it may
  // end here; true when s is then complete.
  bool end(State& s);
  // closing() as if s were the committed state.
  std::string closing(const State& s) const;
  // True when advance(s, c) would accept c and leave s as it is (most bytes inside a string
  // value): the probe can then share its parent's state.
  static bool inert(const State& s, char c) {
    return s.s == S::string && !s.in_key && s.literals == 0 &&
           static_cast<unsigned char>(c) >= 0x20 && c != '"' && c != '\\';
  }
  // The TokenTrie byte class of exactly the bytes inert(s, c) accepts (0: none).
  static uint8_t inert_class(const State& s) {
    return s.s == S::string && !s.in_key && s.literals == 0 ? TokenTrie::kJsonStringByte : 0;
  }
  // A TokenTrie byte class whose bytes s accepts in any number and order (0: none): inside a
  // string value, and inside a key that no schema branch checks byte by byte (those bytes
  // change the state, the key's text, but none is refused before the closing quote).
  static uint8_t open_class(const State& s) {
    return s.s == S::string && s.literals == 0 && (!s.in_key || s.plain_key)
               ? TokenTrie::kJsonStringByte
               : 0;
  }

 private:
  enum Mode : uint8_t { kNormal, kLiteral, kFree };
  struct Branch {
    int32_t parent = -1;                  // frames_: the enclosing containers' saved fields
    uint32_t top = JsonSchema::kNoNode;   // the innermost open container's node (none: root)
    uint32_t count = 0;                   // its elements (arrays: started; objects: finished)
    uint32_t node = JsonSchema::kNoNode;  // the next value's node, or the current scalar's
    uint32_t lo = 0, hi = 0, pos = 0;     // kLiteral: node's literals [lo, hi), bytes matched
    uint16_t hold = 0;                    // kLiteral / kFree: the depth at which the value started
    Mode mode = kNormal;  // kFree: the value is unconstrained; kLiteral: it is one of a list
    uint8_t unused = 0;
    bool operator==(const Branch&) const = default;
  };
  struct Frame {
    int32_t parent;
    uint32_t top;
    uint32_t count;
  };
  struct Key {  // a finished key of an open object: chars [off, off + len); len kMark: '{'
    int32_t prev;
    uint32_t off;
    uint32_t len;
  };
  class Edit;
  friend class Edit;
  friend class JsonCloser;

  bool step(State& st, char c);
  bool begin_value(State& st, char c);
  bool fork(State& st, char c, uint8_t types);
  bool end_value(State& st);
  bool close(State& st, bool object);
  bool open_key(State& st);
  bool key_byte(State& st, char c);
  bool close_key(State& st);
  bool next_member(State& st, bool object);
  bool fraction(State& st);
  bool match_literals(State& st, char c);
  template <typename Keep>
  bool filter(State& st, Keep keep);

  const JsonSchema::Node& node(uint32_t i) const { return schema_->node(i); }
  const Branch& branch(const State& st, uint32_t i) const { return branches_[st.branches + i]; }
  std::string_view key_text(const State& st) const;
  bool seen(const State& st, std::string_view key) const;
  bool key_allowed(const State& st, const JsonSchema::Node& obj, std::string_view prefix) const;
  bool in_object(const State& st) const {
    return st.depth > 0 && ((st.objects >> (st.depth - 1)) & 1);
  }
  // Forgets the schema (every live reading becomes "anything"); used by closing().
  void relax();

  std::shared_ptr<const JsonSchema> schema_;
  int max_depth_;
  State state_;
  std::vector<Branch> branches_;
  std::vector<Frame> frames_;
  std::vector<Key> keys_;
  std::string chars_;
};

}  // namespace hibana
