#include "core/json_strict.h"

#include <algorithm>
#include <cstring>

namespace kvtier::internal {

bool IsStrictUtf8(std::string_view text, size_t* bad_offset) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  auto fail = [&](size_t at) {
    if (bad_offset != nullptr) *bad_offset = at;
    return false;
  };
  while (i < n) {
    // Skip ASCII eight bytes at a time: headers are almost all ASCII.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ull) != 0) break;
      i += 8;
    }
    if (i >= n) break;
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return fail(i);  // continuation byte, overlong lead (C0/C1) or F5..FF
    }
    if (n - i < len) return fail(i);
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return fail(i);
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return fail(i);  // overlong
    if (cp >= 0xD800 && cp <= 0xDFFF) return fail(i);                            // surrogate
    if (cp > 0x10FFFF) return fail(i);
    i += len;
  }
  return true;
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, int max_depth, std::vector<JsonNode>* nodes, std::string* arena,
         JsonError* error)
      : text_(text), max_depth_(max_depth), nodes_(nodes), arena_(arena), error_(error) {}

  bool Run() {
    SkipWhitespace();
    if (!ParseValue(0)) return false;
    SkipWhitespace();
    if (pos_ != text_.size()) {
      return Fail(JsonErrorKind::kTrailing,
                  "unexpected '" + Printable(text_[pos_]) + "' after the end of the JSON value");
    }
    return true;
  }

 private:
  static std::string Printable(char c) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F) return std::string(1, c);
    static const char kHex[] = "0123456789abcdef";
    return std::string("\\x") + kHex[u >> 4] + kHex[u & 15];
  }

  bool Fail(JsonErrorKind kind, std::string message) {
    error_->kind = kind;
    error_->offset = pos_;
    error_->message = std::move(message);
    return false;
  }
  bool Syntax(std::string message) { return Fail(JsonErrorKind::kSyntax, std::move(message)); }

  void SkipWhitespace() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') break;
      ++pos_;
    }
  }

  uint32_t AddNode(JsonKind kind) {
    nodes_->push_back(JsonNode{kind, 0, 0, {}});
    return static_cast<uint32_t>(nodes_->size() - 1);
  }
  void Close(uint32_t index) { (*nodes_)[index].end = static_cast<uint32_t>(nodes_->size()); }

  bool ParseValue(int depth) {
    if (pos_ >= text_.size()) return Syntax("unexpected end of input, expected a value");
    char c = text_[pos_];
    switch (c) {
      case '{':
        return ParseObject(depth + 1);
      case '[':
        return ParseArray(depth + 1);
      case '"':
        return ParseString();
      case 't':
        return ParseLiteral("true", JsonKind::kTrue);
      case 'f':
        return ParseLiteral("false", JsonKind::kFalse);
      case 'n':
        return ParseLiteral("null", JsonKind::kNull);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
        return Syntax("unexpected '" + Printable(c) + "', expected a value");
    }
  }

  bool ParseLiteral(std::string_view word, JsonKind kind) {
    if (text_.substr(pos_, word.size()) != word)
      return Syntax("bad literal, expected " + std::string(word));
    pos_ += word.size();
    Close(AddNode(kind));
    return true;
  }

  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  bool ParseNumber() {
    size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    if (pos_ >= text_.size() || !IsDigit(text_[pos_])) return Syntax("bad number: no digits");
    if (text_[pos_] == '0') {
      ++pos_;
      if (pos_ < text_.size() && IsDigit(text_[pos_])) return Syntax("bad number: leading zero");
    } else {
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_]))
        return Syntax("bad number: no digits after '.'");
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (pos_ >= text_.size() || !IsDigit(text_[pos_]))
        return Syntax("bad number: no exponent digits");
      while (pos_ < text_.size() && IsDigit(text_[pos_])) ++pos_;
    }
    uint32_t n = AddNode(JsonKind::kNumber);
    (*nodes_)[n].text = text_.substr(start, pos_ - start);
    Close(n);
    return true;
  }

  bool ReadHex4(uint32_t* out) {
    if (text_.size() - pos_ < 4) return Syntax("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = text_[pos_ + k];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        v |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        v |= c - 'A' + 10;
      } else {
        return Syntax("bad hex digit in \\u escape");
      }
    }
    pos_ += 4;
    *out = v;
    return true;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // Parses a string at pos_ (the opening quote) into a new kString node.
  bool ParseString() {
    ++pos_;  // opening quote
    size_t start = pos_;
    // Fast path: no escapes.
    while (pos_ < text_.size()) {
      auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"' || c == '\\' || c < 0x20) break;
      ++pos_;
    }
    if (pos_ >= text_.size()) return Syntax("unterminated string");
    auto c = static_cast<unsigned char>(text_[pos_]);
    if (c == '"') {
      uint32_t n = AddNode(JsonKind::kString);
      (*nodes_)[n].text = text_.substr(start, pos_ - start);
      ++pos_;
      Close(n);
      return true;
    }
    if (c < 0x20) return Syntax("control character in string");
    // Slow path: decode into the arena. A decoded string is never longer
    // than its literal, so reserving the input size once keeps every view
    // into the arena valid.
    if (arena_->capacity() < text_.size()) arena_->reserve(text_.size());
    size_t arena_start = arena_->size();
    arena_->append(text_.data() + start, pos_ - start);
    while (true) {
      if (pos_ >= text_.size()) return Syntax("unterminated string");
      c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') break;
      if (c < 0x20) return Syntax("control character in string");
      if (c != '\\') {
        arena_->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size()) return Syntax("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"':
          arena_->push_back('"');
          break;
        case '\\':
          arena_->push_back('\\');
          break;
        case '/':
          arena_->push_back('/');
          break;
        case 'b':
          arena_->push_back('\b');
          break;
        case 'f':
          arena_->push_back('\f');
          break;
        case 'n':
          arena_->push_back('\n');
          break;
        case 'r':
          arena_->push_back('\r');
          break;
        case 't':
          arena_->push_back('\t');
          break;
        case 'u': {
          size_t esc_at = pos_ - 2;
          uint32_t cp = 0;  // set by ReadHex4 (GCC -O2 cannot tell)
          if (!ReadHex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            pos_ = esc_at;
            return Syntax("lone low surrogate escape");
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo = 0;
            if (text_.substr(pos_, 2) != "\\u") {
              pos_ = esc_at;
              return Syntax("high surrogate escape without a low surrogate");
            }
            pos_ += 2;
            if (!ReadHex4(&lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) {
              pos_ = esc_at;
              return Syntax("high surrogate escape without a low surrogate");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          if (cp == 0) {
            pos_ = esc_at;
            return Fail(JsonErrorKind::kNul, "\\u0000 in a string");
          }
          AppendUtf8(cp, arena_);
          break;
        }
        default:
          return Syntax("bad escape '\\" + Printable(e) + "'");
      }
    }
    ++pos_;  // closing quote
    uint32_t n = AddNode(JsonKind::kString);
    (*nodes_)[n].text =
        std::string_view(arena_->data() + arena_start, arena_->size() - arena_start);
    Close(n);
    return true;
  }

  bool ParseArray(int depth) {
    if (depth > max_depth_) return Fail(JsonErrorKind::kTooDeep, "nesting too deep");
    ++pos_;
    uint32_t self = AddNode(JsonKind::kArray);
    uint32_t count = 0;
    SkipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      Close(self);
      return true;
    }
    while (true) {
      SkipWhitespace();
      if (!ParseValue(depth)) return false;
      ++count;
      SkipWhitespace();
      if (pos_ >= text_.size()) return Syntax("unterminated array");
      char c = text_[pos_++];
      if (c == ']') break;
      if (c != ',') {
        --pos_;
        return Syntax("expected ',' or ']' in array");
      }
    }
    (*nodes_)[self].count = count;
    Close(self);
    return true;
  }

  bool ParseObject(int depth) {
    if (depth > max_depth_) return Fail(JsonErrorKind::kTooDeep, "nesting too deep");
    size_t object_start = pos_;
    ++pos_;
    uint32_t self = AddNode(JsonKind::kObject);
    uint32_t count = 0;
    SkipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      Close(self);
      return true;
    }
    while (true) {
      SkipWhitespace();
      if (pos_ >= text_.size()) return Syntax("unterminated object");
      if (text_[pos_] != '"') return Syntax("expected a string key in object");
      if (!ParseString()) return false;
      SkipWhitespace();
      if (pos_ >= text_.size() || text_[pos_] != ':')
        return Syntax("expected ':' after object key");
      ++pos_;
      SkipWhitespace();
      if (!ParseValue(depth)) return false;
      ++count;
      SkipWhitespace();
      if (pos_ >= text_.size()) return Syntax("unterminated object");
      char c = text_[pos_++];
      if (c == '}') break;
      if (c != ',') {
        --pos_;
        return Syntax("expected ',' or '}' in object");
      }
    }
    (*nodes_)[self].count = count;
    Close(self);
    return CheckDuplicates(self, object_start);
  }

  bool CheckDuplicates(uint32_t object, size_t object_start) {
    const JsonNode& obj = (*nodes_)[object];
    if (obj.count < 2) return true;
    keys_.clear();
    uint32_t k = object + 1;
    for (uint32_t i = 0; i < obj.count; ++i) {
      keys_.push_back((*nodes_)[k].text);
      k = (*nodes_)[k + 1].end;
    }
    std::sort(keys_.begin(), keys_.end());
    auto dup = std::adjacent_find(keys_.begin(), keys_.end());
    if (dup == keys_.end()) return true;
    std::string shown(dup->substr(0, 64));
    for (char& ch : shown) {
      if (static_cast<unsigned char>(ch) < 0x20) ch = '?';
    }
    pos_ = object_start;
    return Fail(JsonErrorKind::kDuplicateKey, "duplicate key \"" + shown + "\" in an object");
  }

  std::string_view text_;
  int max_depth_;
  std::vector<JsonNode>* nodes_;
  std::string* arena_;
  JsonError* error_;
  size_t pos_ = 0;
  std::vector<std::string_view> keys_;
};

}  // namespace

bool JsonDocument::Parse(std::string_view text, int max_depth, JsonError* error) {
  nodes_.clear();
  arena_.clear();
  if (text.size() >= UINT32_MAX) {  // node indices are 32-bit
    error->kind = JsonErrorKind::kSyntax;
    error->offset = 0;
    error->message = "input too large";
    return false;
  }
  Parser parser(text, max_depth, &nodes_, &arena_, error);
  if (parser.Run()) return true;
  nodes_.clear();
  return false;
}

std::optional<JsonError> CheckUserJson(std::string_view text, int max_depth) {
  JsonError error;
  if (size_t bad = 0; !IsStrictUtf8(text, &bad)) {
    error.offset = bad;
    error.message = "not UTF-8";
    return error;
  }
  JsonDocument doc;
  if (doc.Parse(text, max_depth, &error)) return std::nullopt;
  return error;
}

std::string DescribeJsonError(const JsonError& error, int max_depth) {
  const std::string at = " at byte " + std::to_string(error.offset);
  if (error.kind == JsonErrorKind::kTooDeep) {
    return "nested deeper than " + std::to_string(max_depth) + " levels" + at;
  }
  return error.message + at;
}

std::optional<uint64_t> JsonUint64(const JsonNode& node) {
  if (node.kind != JsonKind::kNumber || node.text.empty()) return std::nullopt;
  uint64_t v = 0;
  for (char c : node.text) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

void AppendJsonString(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t run = 0;  // start of the current stretch that needs no escaping
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        out->append("\\u00");
        out->push_back(kHex[c >> 4]);
        out->push_back(kHex[c & 15]);
    }
  }
  out->append(s.data() + run, s.size() - run);
  out->push_back('"');
}

}  // namespace kvtier::internal
