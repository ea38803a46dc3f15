// A recursive-descent check of the signature grammar of docs/layouts.md:
//   signature  = "kvtier-layout-v1" ";bt=" uint 1*layer-run
//   layer-run  = ";L" uint [ "-" uint ] "=" name [ features ] ":" tensor *( "," tensor )
//   features   = "{" ( window [ "," quant ] / quant ) "}"
//   window     = "window=" uint ; quant = "quant=" name ",bits=" uint ",group=" uint
//   tensor     = name ":" dtype "[" uint *( "," uint ) "]"
#include "signature_form.h"

#include <string>

namespace kvtier::cli {
namespace {

constexpr std::string_view kPrefix = "kvtier-layout-v1;bt=";
constexpr size_t kMaxName = 64;
constexpr std::string_view kDTypes[] = {"F16", "BF16", "F32",  "F64",     "I8",
                                        "I16", "I32",  "I64",  "U8",      "U16",
                                        "U32", "U64",  "BOOL", "F8_E4M3", "F8_E5M2"};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<uint32_t> Run() {
    if (text_.substr(0, kPrefix.size()) != kPrefix) {
      return Bad(0, "does not start with \"kvtier-layout-v1;bt=\"");
    }
    pos_ = kPrefix.size();
    uint64_t bt = 0;
    KVTIER_RETURN_IF_ERROR(Uint(&bt, "bt"));
    if (bt == 0 || bt > UINT32_MAX) return Bad(pos_, "bt must be 1..4294967295");
    uint64_t next_layer = 0;
    std::string_view previous_body;
    while (pos_ < text_.size()) {
      if (text_.substr(pos_, 2) != ";L") return Bad(pos_, "expected \";L\" (a layer run)");
      pos_ += 2;
      uint64_t first = 0;
      uint64_t last = 0;
      KVTIER_RETURN_IF_ERROR(Uint(&first, "layer number"));
      if (first != next_layer) {
        return Bad(pos_, "layer runs must number the layers 0, 1, ... without gaps (expected L" +
                             std::to_string(next_layer) + ")");
      }
      last = first;
      if (Eat('-')) {
        KVTIER_RETURN_IF_ERROR(Uint(&last, "last layer"));
        if (last <= first) return Bad(pos_, "a run L<i>-<j> needs j > i (one layer is L<i>)");
      }
      if (!Eat('=')) return Bad(pos_, "expected '=' after the layer numbers");
      const size_t body_start = pos_;
      KVTIER_RETURN_IF_ERROR(Name("cache type"));
      if (Eat('{')) KVTIER_RETURN_IF_ERROR(Features());
      if (!Eat(':')) return Bad(pos_, "expected ':' after the cache type");
      do {
        KVTIER_RETURN_IF_ERROR(Tensor());
      } while (Eat(','));
      const std::string_view body = text_.substr(body_start, pos_ - body_start);
      if (body == previous_body) {
        return Bad(body_start, "equal neighbouring runs must be one run (runs are maximal)");
      }
      previous_body = body;
      next_layer = last + 1;
      if (pos_ < text_.size() && text_[pos_] != ';') return Bad(pos_, "unexpected character");
    }
    if (next_layer == 0) return Bad(pos_, "no layer runs");
    return static_cast<uint32_t>(bt);
  }

 private:
  // After "{": a window and/or a quantization, in that order, then "}".
  Status Features() {
    bool any = false;
    if (Lit("window=")) {
      uint64_t window = 0;
      KVTIER_RETURN_IF_ERROR(Uint(&window, "window"));
      if (window == 0 || window > UINT32_MAX) return Bad(pos_, "window must be 1..4294967295");
      any = true;
    }
    if ((!any || Eat(',')) && Lit("quant=")) {
      KVTIER_RETURN_IF_ERROR(Name("quantization mode"));
      uint64_t bits = 0;
      uint64_t group = 0;
      if (!Lit(",bits=")) return Bad(pos_, "expected \",bits=\"");
      KVTIER_RETURN_IF_ERROR(Uint(&bits, "bits"));
      if (bits == 0 || bits > 8) return Bad(pos_, "bits must be 1..8");
      if (!Lit(",group=")) return Bad(pos_, "expected \",group=\"");
      KVTIER_RETURN_IF_ERROR(Uint(&group, "group"));
      if (group == 0 || group > 65536) return Bad(pos_, "group must be 1..65536");
      any = true;
    }
    if (!any) return Bad(pos_, "expected \"window=\" or \"quant=\" after '{'");
    if (!Eat('}')) return Bad(pos_, "expected '}' after the layer's features");
    return Status::Ok();
  }

  bool Lit(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }

  Status Tensor() {
    KVTIER_RETURN_IF_ERROR(Name("role"));
    if (!Eat(':')) return Bad(pos_, "expected ':' after the role");
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != '[') ++pos_;
    const std::string_view dtype = text_.substr(start, pos_ - start);
    bool known = false;
    for (std::string_view d : kDTypes) known = known || d == dtype;
    if (!known) return Bad(start, "unknown dtype '" + std::string(dtype.substr(0, 16)) + "'");
    if (!Eat('[')) return Bad(pos_, "expected '[' (the shape)");
    do {
      uint64_t dim = 0;
      KVTIER_RETURN_IF_ERROR(Uint(&dim, "dimension"));
    } while (Eat(','));
    if (!Eat(']')) return Bad(pos_, "expected ']' after the shape");
    return Status::Ok();
  }

  Status Name(std::string_view what) {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    if (pos_ == start) return Bad(start, "expected a " + std::string(what));
    if (pos_ - start > kMaxName) return Bad(start, std::string(what) + " longer than 64");
    return Status::Ok();
  }

  // A decimal number without leading zeros (at most 19 digits: no overflow).
  Status Uint(uint64_t* out, std::string_view what) {
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    const size_t digits = pos_ - start;
    if (digits == 0) return Bad(start, "expected a number (" + std::string(what) + ")");
    if (digits > 1 && text_[start] == '0') {
      return Bad(start, std::string(what) + " has a leading zero");
    }
    if (digits > 19) return Bad(start, std::string(what) + " is too large");
    uint64_t v = 0;
    for (size_t i = start; i < pos_; ++i) v = v * 10 + static_cast<uint64_t>(text_[i] - '0');
    *out = v;
    return Status::Ok();
  }

  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  }

  bool Eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Status Bad(size_t at, const std::string& why) const {
    return Status::InvalidArgument("not a layout signature (docs/layouts.md): " + why +
                                   " at character " + std::to_string(at));
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Result<uint32_t> CheckSignatureForm(std::string_view signature) { return Parser(signature).Run(); }

}  // namespace kvtier::cli
