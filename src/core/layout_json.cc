// ModelLayout <-> JSON (schema in docs/layouts.md).
//
// Parsing is strict: duplicate keys, unknown fields, wrong types, negative or
// fractional numbers and unknown dtypes are InvalidArgument errors whose
// message names the field ("layout JSON: layers[1].states[0].dtype: ...").
// No nlohmann exception leaves this file.
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/json_strict.h"
#include "core/layout_internal.h"
#include "kvtier/layout.h"

namespace kvtier {
namespace {

using nlohmann::json;

constexpr std::string_view kTokenDim = "T";

Status JsonError(const std::string& path, const std::string& what) {
  return Status::InvalidArgument("layout JSON: " + path + ": " + what);
}

std::string TypeName(const json& j) {
  if (j.is_number_unsigned()) return "a non-negative integer";
  if (j.is_number_integer()) return "a negative integer";
  if (j.is_number_float()) return "a fractional number";
  return std::string(j.type_name());
}

// A short rendering of a JSON value for error messages.
std::string Shown(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 60) + "...";
  return s;
}

// First pass over the text: nlohmann keeps the last of duplicate keys
// silently, so a SAX handler detects them (and reports syntax errors with
// their byte offset) before the DOM parse. It also stops a document nested
// deeper than kMaxUserJsonDepth: the DOM's dump (in messages) and copies
// recurse once per level.
class DuplicateKeyChecker : public nlohmann::json_sax<json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return Enter();
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second) {
      error_ = "duplicate key '" + k.substr(0, 80) + "'";
      return false;
    }
    return true;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return Enter(); }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // ex.what() is "[json.exception.parse_error.101] parse error at line 1,
    // column 2: ..."; drop the bracketed id.
    std::string_view what = ex.what();
    if (size_t close = what.find("] ");
        what.starts_with("[json.exception") && close != std::string_view::npos) {
      what.remove_prefix(close + 2);
    }
    error_ = "not valid JSON: " + std::string(what);
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool Enter() {
    if (++depth_ <= internal::kMaxUserJsonDepth) return true;
    error_ = "nested deeper than " + std::to_string(internal::kMaxUserJsonDepth) + " levels";
    return false;
  }

  std::vector<std::set<std::string>> keys_;
  int depth_ = 0;
  std::string error_;
};

Status CheckFields(const json& obj, const std::string& path,
                   std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (!known) {
      std::string list;
      for (std::string_view a : allowed) {
        if (!list.empty()) list += ", ";
        list += a;
      }
      return JsonError(path.empty() ? "(top level)" : path,
                       "unknown field '" + key.substr(0, 80) + "' (allowed: " + list + ")");
    }
  }
  return Status::Ok();
}

Status RequireField(const json& obj, const std::string& path, const char* field) {
  if (!obj.contains(field)) {
    return JsonError(path.empty() ? "(top level)" : path,
                     std::string("missing required field '") + field + "'");
  }
  return Status::Ok();
}

std::string Child(const std::string& path, std::string_view field) {
  return path.empty() ? std::string(field) : path + "." + std::string(field);
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

Result<uint64_t> ParseUnsigned(const json& j, const std::string& path, uint64_t min, uint64_t max) {
  if (!j.is_number_unsigned()) {
    return JsonError(path, "must be an integer in " + std::to_string(min) + ".." +
                               std::to_string(max) + ", got " + TypeName(j) + " " + Shown(j));
  }
  uint64_t v = j.get<uint64_t>();
  if (v < min || v > max) {
    return JsonError(path, "must be an integer in " + std::to_string(min) + ".." +
                               std::to_string(max) + ", got " + std::to_string(v));
  }
  return v;
}

Result<std::string> ParseString(const json& j, const std::string& path) {
  if (!j.is_string()) return JsonError(path, "must be a string, got " + TypeName(j));
  return j.get<std::string>();
}

Result<TensorSpec> ParseTensor(const json& j, const std::string& path, uint32_t block_tokens) {
  if (!j.is_object()) return JsonError(path, "must be an object, got " + TypeName(j));
  KVTIER_RETURN_IF_ERROR(CheckFields(j, path, {"role", "dtype", "shape"}));
  for (const char* f : {"role", "dtype", "shape"}) KVTIER_RETURN_IF_ERROR(RequireField(j, path, f));
  TensorSpec t;
  KVTIER_ASSIGN_OR_RETURN(t.role, ParseString(j["role"], Child(path, "role")));
  KVTIER_ASSIGN_OR_RETURN(std::string dtype, ParseString(j["dtype"], Child(path, "dtype")));
  std::optional<DType> dt = DTypeFromName(dtype);
  if (!dt) {
    return JsonError(Child(path, "dtype"),
                     "unknown dtype '" + dtype.substr(0, 40) +
                         "' (known: F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, "
                         "BOOL, F8_E4M3, F8_E5M2)");
  }
  t.dtype = *dt;
  const std::string sp = Child(path, "shape");
  const json& shape = j["shape"];
  if (!shape.is_array()) return JsonError(sp, "must be an array, got " + TypeName(shape));
  if (shape.empty() || shape.size() > internal::kMaxRank) {
    return JsonError(sp, "must have 1 to " + std::to_string(internal::kMaxRank) +
                             " dimensions, got " + std::to_string(shape.size()));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    const json& dim = shape[d];
    if (dim.is_string() && dim.get<std::string>() == kTokenDim) {
      if (t.token_dim >= 0) {
        return JsonError(Index(sp, d),
                         "\"T\" (block_tokens) may appear once per shape; it "
                         "already appears at index " +
                             std::to_string(t.token_dim));
      }
      t.token_dim = static_cast<int32_t>(d);
      t.shape.push_back(block_tokens);
      continue;
    }
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() == 0) {
      return JsonError(Index(sp, d), "must be a positive integer or \"T\" (block_tokens), got " +
                                         TypeName(dim) + " " + Shown(dim));
    }
    t.shape.push_back(dim.get<uint64_t>());
  }
  return t;
}

Result<Quantization> ParseQuantization(const json& j, const std::string& path) {
  if (!j.is_object()) return JsonError(path, "must be an object, got " + TypeName(j));
  KVTIER_RETURN_IF_ERROR(CheckFields(j, path, {"mode", "bits", "group_size"}));
  for (const char* f : {"mode", "bits", "group_size"}) {
    KVTIER_RETURN_IF_ERROR(RequireField(j, path, f));
  }
  Quantization q;
  KVTIER_ASSIGN_OR_RETURN(q.mode, ParseString(j["mode"], Child(path, "mode")));
  KVTIER_ASSIGN_OR_RETURN(
      uint64_t bits, ParseUnsigned(j["bits"], Child(path, "bits"), 1, internal::kMaxQuantBits));
  KVTIER_ASSIGN_OR_RETURN(uint64_t group, ParseUnsigned(j["group_size"], Child(path, "group_size"),
                                                        1, internal::kMaxQuantGroup));
  q.bits = static_cast<uint32_t>(bits);
  q.group_size = static_cast<uint32_t>(group);
  return q;
}

Result<LayerSpec> ParseLayer(const json& j, const std::string& path, uint32_t block_tokens,
                             uint64_t* repeat) {
  if (!j.is_object()) return JsonError(path, "must be an object, got " + TypeName(j));
  KVTIER_RETURN_IF_ERROR(CheckFields(
      j, path, {"cache_type", "states", "meta_state", "repeat", "window", "quantization"}));
  for (const char* f : {"cache_type", "states"}) KVTIER_RETURN_IF_ERROR(RequireField(j, path, f));
  LayerSpec layer;
  KVTIER_ASSIGN_OR_RETURN(layer.cache_type,
                          ParseString(j["cache_type"], Child(path, "cache_type")));
  *repeat = 1;
  if (j.contains("repeat")) {
    KVTIER_ASSIGN_OR_RETURN(
        *repeat, ParseUnsigned(j["repeat"], Child(path, "repeat"), 1, internal::kMaxLayers));
  }
  if (j.contains("window")) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t window,
                            ParseUnsigned(j["window"], Child(path, "window"), 1, UINT32_MAX));
    layer.window = static_cast<uint32_t>(window);
  }
  if (j.contains("quantization")) {
    KVTIER_ASSIGN_OR_RETURN(layer.quantization,
                            ParseQuantization(j["quantization"], Child(path, "quantization")));
  }
  const std::string sp = Child(path, "states");
  const json& states = j["states"];
  if (!states.is_array()) return JsonError(sp, "must be an array, got " + TypeName(states));
  if (states.size() > internal::kMaxTensors) {
    return JsonError(sp, "has " + std::to_string(states.size()) + " entries; at most " +
                             std::to_string(internal::kMaxTensors) + " allowed");
  }
  for (size_t k = 0; k < states.size(); ++k) {
    KVTIER_ASSIGN_OR_RETURN(TensorSpec t, ParseTensor(states[k], Index(sp, k), block_tokens));
    layer.states.push_back(std::move(t));
  }
  if (j.contains("meta_state")) {
    const std::string mp = Child(path, "meta_state");
    const json& meta = j["meta_state"];
    if (!meta.is_array())
      return JsonError(mp, "must be an array of strings, got " + TypeName(meta));
    for (size_t m = 0; m < meta.size(); ++m) {
      KVTIER_ASSIGN_OR_RETURN(std::string s, ParseString(meta[m], Index(mp, m)));
      layer.meta_state.push_back(std::move(s));
    }
  }
  // Same checks as ModelLayout::Validate(), but naming the JSON entry, which
  // differs from the layer index once `repeat` expands entries.
  uint64_t bytes = 0;
  Status s = internal::ValidateLayer(layer, block_tokens, path, &bytes);
  if (!s.ok()) return Status::InvalidArgument("layout JSON: " + s.message());
  return layer;
}

Result<ModelLayout> ParseLayout(const json& j) {
  if (!j.is_object()) return JsonError("(top level)", "must be an object, got " + TypeName(j));
  KVTIER_RETURN_IF_ERROR(CheckFields(j, "", {"name", "block_tokens", "layers"}));
  for (const char* f : {"block_tokens", "layers"}) KVTIER_RETURN_IF_ERROR(RequireField(j, "", f));
  ModelLayout layout;
  if (j.contains("name")) {
    KVTIER_ASSIGN_OR_RETURN(layout.name, ParseString(j["name"], "name"));
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t bt,
                          ParseUnsigned(j["block_tokens"], "block_tokens", 1, UINT32_MAX));
  layout.block_tokens = static_cast<uint32_t>(bt);
  const json& layers = j["layers"];
  if (!layers.is_array()) return JsonError("layers", "must be an array, got " + TypeName(layers));
  if (layers.empty()) return JsonError("layers", "must list at least one layer");
  uint64_t total_layers = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string lp = Index("layers", i);
    uint64_t repeat = 1;
    KVTIER_ASSIGN_OR_RETURN(LayerSpec layer,
                            ParseLayer(layers[i], lp, layout.block_tokens, &repeat));
    total_layers += repeat;
    if (total_layers > internal::kMaxLayers) {
      return JsonError(lp, "the model has more than " + std::to_string(internal::kMaxLayers) +
                               " layers with this entry");
    }
    layout.layers.insert(layout.layers.end(), repeat, layer);
  }
  Status s = layout.Validate();
  if (!s.ok()) return Status::InvalidArgument("layout JSON: " + s.message());
  return layout;
}

}  // namespace

Result<ModelLayout> ModelLayout::FromJson(std::string_view json_text) {
  try {
    DuplicateKeyChecker checker;
    if (!json::sax_parse(json_text, &checker)) {
      return Status::InvalidArgument("layout JSON: " + (checker.error().empty()
                                                            ? std::string("not valid JSON")
                                                            : checker.error()));
    }
    json j = json::parse(json_text);
    return ParseLayout(j);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("layout JSON: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("layout JSON: out of memory while parsing");
  }
}

namespace {

std::string Quoted(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string ModelLayout::ToJson() const {
  // Written by hand rather than json::dump(2) so that each state tensor sits
  // on one line; the text parses back with FromJson to an equal layout.
  std::string out = "{\n  \"name\": " + Quoted(name) + ",\n";
  out += "  \"block_tokens\": " + std::to_string(block_tokens) + ",\n";
  out += "  \"layers\": [";
  size_t i = 0;
  while (i < layers.size()) {
    size_t n = 1;
    while (i + n < layers.size() && layers[i + n] == layers[i]) ++n;
    const LayerSpec& layer = layers[i];
    out += i == 0 ? "\n    {" : ",\n    {";
    if (n > 1) out += "\"repeat\": " + std::to_string(n) + ", ";
    out += "\"cache_type\": " + Quoted(layer.cache_type);
    if (layer.window != 0) out += ", \"window\": " + std::to_string(layer.window);
    if (layer.quantization.enabled()) {
      const Quantization& q = layer.quantization;
      out += ", \"quantization\": {\"mode\": " + Quoted(q.mode) +
             ", \"bits\": " + std::to_string(q.bits) +
             ", \"group_size\": " + std::to_string(q.group_size) + "}";
    }
    if (!layer.meta_state.empty()) {
      out += ", \"meta_state\": [";
      for (size_t m = 0; m < layer.meta_state.size(); ++m) {
        if (m > 0) out += ", ";
        out += Quoted(layer.meta_state[m]);
      }
      out += "]";
    }
    out += ", \"states\": [";
    for (size_t k = 0; k < layer.states.size(); ++k) {
      const TensorSpec& t = layer.states[k];
      out += k == 0 ? "\n      " : ",\n      ";
      out += "{\"role\": " + Quoted(t.role) + ", \"dtype\": \"" + std::string(DTypeName(t.dtype)) +
             "\", \"shape\": [";
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (d > 0) out += ", ";
        out += static_cast<int64_t>(d) == t.token_dim ? "\"T\"" : std::to_string(t.shape[d]);
      }
      out += "]}";
    }
    out += "\n    ]}";
    i += n;
  }
  out += "\n  ]\n}\n";
  return out;
}

}  // namespace kvtier
