// A strict, bounded JSON parser for untrusted block-file headers.
//
// nlohmann-json accepts duplicate keys (the last one wins) and parses
// numbers into doubles, so a header could say one thing to us and another to
// a different safetensors reader. This parser accepts only RFC 8259 JSON and
// additionally rejects: duplicate keys in any object, NUL characters (raw or
// escaped \u0000), lone surrogate escapes, nesting deeper than a limit and
// anything but whitespace after the top-level value. Input must already be
// valid UTF-8 (IsStrictUtf8); strings are returned decoded.
//
// The result is a flat tape of nodes; a node's subtree occupies the indices
// [index, end). Strings without escapes are views into the input; decoded
// strings live in the document's arena, which is reserved up front so views
// stay valid. Memory is O(input size): at most one node per input byte.
//
// Thread safety: a JsonDocument is an immutable value once parsed.
#ifndef KVTIER_CORE_JSON_STRICT_H_
#define KVTIER_CORE_JSON_STRICT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::internal {

// True iff `text` is well-formed UTF-8: no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence.
// On failure *bad_offset (if given) is the offset of the first bad byte.
bool IsStrictUtf8(std::string_view text, size_t* bad_offset = nullptr);

enum class JsonKind : uint8_t { kNull, kFalse, kTrue, kNumber, kString, kArray, kObject };

struct JsonNode {
  JsonKind kind = JsonKind::kNull;
  // Arrays: element count; objects: member count (each member is a key
  // string node followed by its value's subtree).
  uint32_t count = 0;
  // One past the last node of this subtree.
  uint32_t end = 0;
  // Strings: the decoded text; numbers: the literal as written.
  std::string_view text;
};

enum class JsonErrorKind : uint8_t {
  kSyntax,        // not JSON
  kTrailing,      // non-whitespace after the top-level value
  kTooDeep,       // nesting deeper than max_depth
  kDuplicateKey,  // a key repeated within one object
  kNul,           // \u0000 in a string
};

struct JsonError {
  JsonErrorKind kind = JsonErrorKind::kSyntax;
  size_t offset = 0;    // byte offset in the input where the problem is
  std::string message;  // e.g. "expected ':' after object key"
};

class JsonDocument {
 public:
  // Parses `text` (which must outlive the document). `max_depth` counts
  // nested arrays/objects: 1 allows `{}` or `[]` with scalar members only.
  // Returns false and fills *error on any violation.
  bool Parse(std::string_view text, int max_depth, JsonError* error);

  const JsonNode& node(uint32_t i) const { return nodes_[i]; }
  const JsonNode& root() const { return nodes_[0]; }
  size_t node_count() const { return nodes_.size(); }

 private:
  std::vector<JsonNode> nodes_;
  std::string arena_;  // decoded strings that had escapes
};

// How deep JSON that a person writes may nest: option objects, config
// files and layout files. The deepest legitimate one (a layout's
// layers[].states[].shape) nests 4 levels; nlohmann's dump and copies
// recurse once per level, so an unbounded document would overflow the stack.
inline constexpr int kMaxUserJsonDepth = 32;

// Checks JSON a user wrote before a DOM parser (nlohmann, which keeps the
// last of repeated keys) reads it: strict UTF-8, RFC 8259, no key repeated
// within any object, nesting at most `max_depth`. nullopt when it passes,
// else the first violation (kSyntax also for bad UTF-8). Memory O(text).
std::optional<JsonError> CheckUserJson(std::string_view text, int max_depth = kMaxUserJsonDepth);

// "<message> at byte <offset>", and for kTooDeep "nested deeper than
// <max_depth> levels at byte <offset>": for error messages.
std::string DescribeJsonError(const JsonError& error, int max_depth = kMaxUserJsonDepth);

// Iterates the members of an object node: for (auto [k, v] : Members(doc, i)).
// `k` and `v` are node indices (k is the key's string node).
class JsonMembers {
 public:
  struct Iterator {
    const JsonDocument* doc;
    uint32_t key;
    uint32_t left;
    std::pair<uint32_t, uint32_t> operator*() const { return {key, key + 1}; }
    Iterator& operator++() {
      key = doc->node(key + 1).end;
      --left;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return left != o.left; }
  };
  JsonMembers(const JsonDocument& doc, uint32_t object) : doc_(&doc), object_(object) {}
  Iterator begin() const { return {doc_, object_ + 1, doc_->node(object_).count}; }
  Iterator end() const { return {doc_, 0, 0}; }

 private:
  const JsonDocument* doc_;
  uint32_t object_;
};

// Iterates the elements of an array node, yielding node indices.
class JsonElements {
 public:
  struct Iterator {
    const JsonDocument* doc;
    uint32_t at;
    uint32_t left;
    uint32_t operator*() const { return at; }
    Iterator& operator++() {
      at = doc->node(at).end;
      --left;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return left != o.left; }
  };
  JsonElements(const JsonDocument& doc, uint32_t array) : doc_(&doc), array_(array) {}
  Iterator begin() const { return {doc_, array_ + 1, doc_->node(array_).count}; }
  Iterator end() const { return {doc_, 0, 0}; }

 private:
  const JsonDocument* doc_;
  uint32_t array_;
};

// The value of a number node written as a plain non-negative integer
// (digits only: no sign, fraction or exponent) that fits in 64 bits.
std::optional<uint64_t> JsonUint64(const JsonNode& node);

// Appends `s` to `out` as a JSON string literal (quotes included): escapes
// '"', '\\' and control characters; other UTF-8 passes through.
void AppendJsonString(std::string_view s, std::string* out);

}  // namespace kvtier::internal

#endif  // KVTIER_CORE_JSON_STRICT_H_
