#include "core/safetensors_header.h"

#include <algorithm>
#include <string>

#include "core/block_file_internal.h"
#include "kvtier/layout.h"

namespace kvtier::internal {

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";

std::string Str(uint64_t v) { return std::to_string(v); }

// Parses a canonical decimal (no sign, no leading zero) that fits in u32.
bool ParseIndex(std::string_view digits, uint32_t* out) {
  if (digits.empty() || digits.size() > 10) return false;
  if (digits.size() > 1 && digits[0] == '0') return false;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

// layer_{i}_state_{k}
bool ParseTensorName(std::string_view name, uint32_t* layer, uint32_t* state) {
  constexpr std::string_view kLayer = "layer_";
  constexpr std::string_view kState = "_state_";
  if (name.substr(0, kLayer.size()) != kLayer) return false;
  name.remove_prefix(kLayer.size());
  size_t sep = name.find(kState);
  if (sep == std::string_view::npos) return false;
  return ParseIndex(name.substr(0, sep), layer) &&
         ParseIndex(name.substr(sep + kState.size()), state);
}

std::string_view KindName(JsonKind kind) {
  switch (kind) {
    case JsonKind::kNull:
      return "null";
    case JsonKind::kFalse:
    case JsonKind::kTrue:
      return "a boolean";
    case JsonKind::kNumber:
      return "a number";
    case JsonKind::kString:
      return "a string";
    case JsonKind::kArray:
      return "an array";
    case JsonKind::kObject:
      return "an object";
  }
  return "?";
}

Status ParseEntry(const JsonDocument& doc, uint32_t entry, HeaderTensor* t) {
  const std::string& name = t->view.name;
  const JsonNode& e = doc.node(entry);
  if (e.kind != JsonKind::kObject) {
    return Reject(BlockFileError::kBadTensorEntry,
                  "tensor " + name + " is " + std::string(KindName(e.kind)) + ", not an object");
  }
  uint32_t dtype_node = 0, shape_node = 0, offsets_node = 0;
  for (auto [k, v] : JsonMembers(doc, entry)) {
    std::string_view key = doc.node(k).text;
    if (key == "dtype") {
      dtype_node = v;
    } else if (key == "shape") {
      shape_node = v;
    } else if (key == "data_offsets") {
      offsets_node = v;
    } else {
      return Reject(BlockFileError::kBadTensorEntry,
                    "tensor " + name + " has unknown field " + Quote(key));
    }
  }
  if (dtype_node == 0 || shape_node == 0 || offsets_node == 0) {
    return Reject(BlockFileError::kBadTensorEntry, "tensor " + name + " lacks " +
                                                       (dtype_node == 0   ? "dtype"
                                                        : shape_node == 0 ? "shape"
                                                                          : "data_offsets"));
  }

  const JsonNode& d = doc.node(dtype_node);
  if (d.kind != JsonKind::kString) {
    return Reject(
        BlockFileError::kBadTensorEntry,
        "tensor " + name + " dtype is " + std::string(KindName(d.kind)) + ", not a string");
  }
  std::optional<DType> dtype = DTypeFromName(d.text);
  if (!dtype) {
    return Reject(BlockFileError::kUnknownDType, "tensor " + name + " has dtype " + Quote(d.text));
  }
  t->view.dtype = *dtype;

  const JsonNode& s = doc.node(shape_node);
  if (s.kind != JsonKind::kArray) {
    return Reject(BlockFileError::kBadShape, "tensor " + name + " shape is " +
                                                 std::string(KindName(s.kind)) + ", not an array");
  }
  if (s.count > kMaxTensorRank) {
    return Reject(BlockFileError::kBadShape, "tensor " + name + " has " + Str(s.count) +
                                                 " dimensions (at most " + Str(kMaxTensorRank) +
                                                 ")");
  }
  t->view.shape.clear();
  t->view.shape.reserve(s.count);
  uint64_t bytes = DTypeSize(*dtype);
  bool overflow = false;
  size_t dim_index = 0;
  for (uint32_t dim : JsonElements(doc, shape_node)) {
    const JsonNode& n = doc.node(dim);
    std::optional<uint64_t> v = JsonUint64(n);
    if (!v || *v == 0) {
      std::string what =
          n.kind == JsonKind::kNumber ? Quote(n.text) : std::string(KindName(n.kind));
      return Reject(BlockFileError::kBadShape, "tensor " + name + " shape[" + Str(dim_index) +
                                                   "] is " + what + ", not an integer >= 1");
    }
    // Overflow at any step is final: a later factor cannot make it right,
    // and a product that wrapped to 0 must not pass as an empty tensor.
    if (bytes > UINT64_MAX / *v) overflow = true;
    bytes *= *v;
    t->view.shape.push_back(*v);
    ++dim_index;
  }
  if (overflow) {
    return Reject(BlockFileError::kShapeOverflow,
                  "tensor " + name + " elements x dtype size overflows 64 bits");
  }

  const JsonNode& o = doc.node(offsets_node);
  if (o.kind != JsonKind::kArray || o.count != 2) {
    return Reject(BlockFileError::kBadOffsets,
                  "tensor " + name + " data_offsets is not an array of two integers");
  }
  uint64_t off[2];
  size_t i = 0;
  for (uint32_t idx : JsonElements(doc, offsets_node)) {
    std::optional<uint64_t> v = JsonUint64(doc.node(idx));
    if (!v) {
      return Reject(BlockFileError::kBadOffsets, "tensor " + name + " data_offsets[" + Str(i) +
                                                     "] is not a non-negative 64-bit integer");
    }
    off[i++] = *v;
  }
  t->begin = off[0];
  t->end = off[1];
  t->bytes = bytes;
  return Status::Ok();
}

Status CheckTensorTable(std::vector<HeaderTensor>* tensors, uint64_t data_size, uint32_t* layers) {
  if (tensors->empty()) return Reject(BlockFileError::kMissingTensor, "no tensors");
  std::sort(tensors->begin(), tensors->end(), [](const HeaderTensor& a, const HeaderTensor& b) {
    return a.view.layer != b.view.layer ? a.view.layer < b.view.layer : a.view.state < b.view.state;
  });
  // Dense names: layer_0_state_0 first, then either the next state of the
  // same layer or state 0 of the next layer.
  uint32_t layer = 0, state = 0;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const TensorView& v = (*tensors)[i].view;
    if (i > 0) {
      if (v.layer == layer) {
        ++state;
      } else {
        ++layer;
        state = 0;
      }
    }
    if (v.layer != layer || v.state != state) {
      std::string expected = "layer_" + Str(layer) + "_state_" + Str(state);
      return Reject(BlockFileError::kMissingTensor,
                    "tensor " + expected + " is missing (next present: " + v.name + ")");
    }
  }
  *layers = layer + 1;

  uint64_t cursor = 0;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const HeaderTensor& t = (*tensors)[i];
    const std::string& name = t.view.name;
    if (t.end < t.begin) {
      return Reject(BlockFileError::kOffsetsReversed, "tensor " + name + " data_offsets [" +
                                                          Str(t.begin) + ", " + Str(t.end) +
                                                          "] end before begin");
    }
    if (t.end - t.begin != t.bytes) {
      return Reject(BlockFileError::kShapeSizeMismatch,
                    "tensor " + name + " shape needs " + Str(t.bytes) +
                        " bytes, data_offsets span " + Str(t.end - t.begin));
    }
    if (i == 0 && t.begin != 0) {
      return Reject(BlockFileError::kFirstOffsetNonzero,
                    "first tensor " + name + " starts at " + Str(t.begin) + ", not 0");
    }
    if (t.begin > cursor) {
      return Reject(BlockFileError::kOffsetsGap, "tensor " + name + " starts at " + Str(t.begin) +
                                                     ", previous tensor ends at " + Str(cursor));
    }
    if (t.begin < cursor) {
      return Reject(BlockFileError::kOffsetsOverlap, "tensor " + name + " starts at " +
                                                         Str(t.begin) +
                                                         ", before the previous "
                                                         "tensor ends at " +
                                                         Str(cursor));
    }
    cursor = t.end;
  }
  if (cursor < data_size) {
    return Reject(BlockFileError::kTrailingBytes,
                  "data section has " + Str(data_size) + " bytes, tensors end at " + Str(cursor));
  }
  if (cursor > data_size) {
    return Reject(
        BlockFileError::kDataTruncated,
        "tensors end at " + Str(cursor) + ", data section has only " + Str(data_size) + " bytes");
  }
  return Status::Ok();
}

}  // namespace

Status ParseSafetensorsHeader(std::string_view json, uint64_t data_size, ParsedHeader* out) {
  JsonError err;
  if (!out->doc.Parse(json, kHeaderMaxDepth, &err)) {
    BlockFileError reason = BlockFileError::kJsonSyntax;
    switch (err.kind) {
      case JsonErrorKind::kSyntax:
        reason = BlockFileError::kJsonSyntax;
        break;
      case JsonErrorKind::kTrailing:
        reason = BlockFileError::kJsonTrailing;
        break;
      case JsonErrorKind::kTooDeep:
        reason = BlockFileError::kJsonTooDeep;
        break;
      case JsonErrorKind::kDuplicateKey:
        reason = BlockFileError::kDuplicateKey;
        break;
      case JsonErrorKind::kNul:
        reason = BlockFileError::kHeaderNul;
        break;
    }
    return Reject(reason, "header JSON at byte " + Str(err.offset) + ": " + err.message);
  }
  const JsonDocument& doc = out->doc;
  const JsonNode& root = doc.root();
  if (root.kind != JsonKind::kObject) {
    return Reject(BlockFileError::kHeaderNotObject,
                  "header is " + std::string(KindName(root.kind)) + ", not an object");
  }

  uint32_t metadata_node = 0;
  size_t tensor_count = 0;
  for (auto [k, v] : JsonMembers(doc, 0)) {
    if (doc.node(k).text == kMetadataKey) {
      metadata_node = v;
    } else {
      ++tensor_count;
    }
  }
  if (tensor_count > kMaxBlockTensors) {
    return Reject(BlockFileError::kTooManyTensors,
                  Str(tensor_count) + " tensors (at most " + Str(kMaxBlockTensors) + ")");
  }

  out->tensors.resize(tensor_count);
  size_t i = 0;
  for (auto [k, v] : JsonMembers(doc, 0)) {
    std::string_view name = doc.node(k).text;
    if (name == kMetadataKey) continue;
    HeaderTensor& t = out->tensors[i++];
    if (!ParseTensorName(name, &t.view.layer, &t.view.state)) {
      return Reject(BlockFileError::kBadTensorName,
                    "tensor name " + Quote(name) + " is not layer_{i}_state_{k}");
    }
    t.view.name.assign(name);
    KVTIER_RETURN_IF_ERROR(ParseEntry(doc, v, &t));
  }
  KVTIER_RETURN_IF_ERROR(CheckTensorTable(&out->tensors, data_size, &out->layers));

  if (metadata_node == 0) {
    return Reject(BlockFileError::kMissingMetadata, "no __metadata__ entry");
  }
  const JsonNode& m = doc.node(metadata_node);
  if (m.kind != JsonKind::kObject) {
    return Reject(BlockFileError::kMetadataNotStrings,
                  "__metadata__ is " + std::string(KindName(m.kind)) + ", not an object");
  }
  out->metadata.reserve(m.count);
  for (auto [k, v] : JsonMembers(doc, metadata_node)) {
    const JsonNode& value = doc.node(v);
    if (value.kind != JsonKind::kString) {
      return Reject(BlockFileError::kMetadataNotStrings,
                    "__metadata__ field " + Quote(doc.node(k).text) + " is " +
                        std::string(KindName(value.kind)) + ", not a string");
    }
    out->metadata.emplace_back(doc.node(k).text, value.text);
  }
  return Status::Ok();
}

}  // namespace kvtier::internal
