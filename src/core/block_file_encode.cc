// EncodeBlock and BlockChecksum.
//
// The encoder builds the header first with placeholder checksums of fixed
// width, so the file size is known before any data is touched; it then
// allocates the whole file once, copies every tensor once and hashes each
// chunk right after copying it (while it is still in cache), and finally
// writes the checksum's hex digits over the placeholder, then each
// tensor's own checksum (`tensor_checksums`, hashed from the same chunks),
// then those of meta_checksum, which covers all of them.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/block_file_internal.h"
#include "core/json_strict.h"
#include "kvtier/block_file.h"
#include "kvtier/layout.h"

namespace kvtier {

namespace {

// Copy-then-hash granularity: small enough that the copied chunk is still
// in L1/L2 when XXH3 reads it back.
constexpr size_t kChunkBytes = 32 << 10;

void AppendUint(uint64_t v, std::string* out) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

// `"name":` then the value appended by the caller.
void AppendField(std::string_view name, std::string* out) {
  out->push_back('"');
  out->append(name);
  out->append("\":");
}

// A string the decoder accepts back: strict UTF-8 without NUL.
Status CheckText(std::string_view what, std::string_view s) {
  if (s.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(std::string(what) + " contains a NUL character");
  }
  if (!internal::IsStrictUtf8(s)) {
    return Status::InvalidArgument(std::string(what) + " is not valid UTF-8");
  }
  return Status::Ok();
}

}  // namespace

std::array<uint8_t, 16> BlockChecksum(std::span<const std::byte> data) {
  XXH128_hash_t h = internal::Xxh3Hash128(data.data(), data.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), c.digest, 16);
  return out;
}

Result<BlockBuffer> EncodeBlock(const EncodeRequest& req) {
  if (req.layout == nullptr) return Status::InvalidArgument("EncodeRequest.layout is null");
  const ModelLayout& layout = *req.layout;
  const size_t layers = layout.layers.size();
  const size_t tensor_count = layout.TensorCount();
  if (tensor_count == 0 || tensor_count > kMaxBlockTensors) {
    return Status::InvalidArgument("layout has " + std::to_string(tensor_count) +
                                   " tensors (need 1.." + std::to_string(kMaxBlockTensors) + ")");
  }
  if (req.tensors.size() != tensor_count) {
    return Status::InvalidArgument("EncodeRequest has " + std::to_string(req.tensors.size()) +
                                   " tensors, the layout has " + std::to_string(tensor_count));
  }
  const uint32_t token_count = req.token_count == 0 ? layout.block_tokens : req.token_count;
  if (token_count > layout.block_tokens) {
    return Status::InvalidArgument("token_count " + std::to_string(token_count) +
                                   " exceeds block_tokens " + std::to_string(layout.block_tokens));
  }
  if (!req.meta_states.empty() && req.meta_states.size() != layers) {
    return Status::InvalidArgument("meta_states has " + std::to_string(req.meta_states.size()) +
                                   " lists, the layout has " + std::to_string(layers) + " layers");
  }
  const std::string signature = layout.Signature();
  KVTIER_RETURN_IF_ERROR(CheckText("layout signature", signature));

  // layer_cache_types and layer_meta_states: JSON arrays inside strings.
  std::string cache_types = "[";
  std::string meta_states = "[";
  for (size_t l = 0; l < layers; ++l) {
    const LayerSpec& spec = layout.layers[l];
    KVTIER_RETURN_IF_ERROR(
        CheckText("layers[" + std::to_string(l) + "].cache_type", spec.cache_type));
    if (l > 0) {
      cache_types.push_back(',');
      meta_states.push_back(',');
    }
    internal::AppendJsonString(spec.cache_type, &cache_types);
    const auto& states = req.meta_states.empty() ? spec.meta_state : req.meta_states[l];
    meta_states.push_back('[');
    for (size_t k = 0; k < states.size(); ++k) {
      KVTIER_RETURN_IF_ERROR(CheckText(
          "meta state " + std::to_string(k) + " of layer " + std::to_string(l), states[k]));
      if (k > 0) meta_states.push_back(',');
      internal::AppendJsonString(states[k], &meta_states);
    }
    meta_states.push_back(']');
  }
  cache_types.push_back(']');
  meta_states.push_back(']');

  char key_hex[64], parent_hex[64], ns_hex[64];
  internal::HexLower(req.key.bytes.data(), 32, key_hex);
  internal::HexLower(req.parent.bytes.data(), 32, parent_hex);
  internal::HexLower(req.ns.bytes.data(), 32, ns_hex);
  char numbers[48];
  auto token_end = std::to_chars(numbers, numbers + 24, token_count).ptr;
  auto created_end = std::to_chars(numbers + 24, numbers + 48, req.created_at).ptr;
  const std::string_view token_text(numbers, token_end - numbers);
  const std::string_view created_text(numbers + 24, created_end - (numbers + 24));

  std::string h;
  h.reserve(512 + signature.size() + cache_types.size() + meta_states.size() + tensor_count * 144);
  h.append("{\"__metadata__\":{");
  AppendField("kvtier_format", &h);
  h.append("\"1\",");
  AppendField("key", &h);
  h.push_back('"');
  h.append(key_hex, 64);
  h.append("\",");
  AppendField("parent", &h);
  h.push_back('"');
  h.append(parent_hex, 64);
  h.append("\",");
  AppendField("namespace", &h);
  h.push_back('"');
  h.append(ns_hex, 64);
  h.append("\",");
  AppendField("token_count", &h);
  h.push_back('"');
  h.append(token_text);
  h.append("\",");
  AppendField("layout_signature", &h);
  internal::AppendJsonString(signature, &h);
  h.push_back(',');
  AppendField("layer_cache_types", &h);
  internal::AppendJsonString(cache_types, &h);
  h.push_back(',');
  AppendField("layer_meta_states", &h);
  internal::AppendJsonString(meta_states, &h);
  h.push_back(',');
  AppendField("created_at", &h);
  h.push_back('"');
  h.append(created_text);
  h.append("\",");
  AppendField("checksum", &h);
  h.push_back('"');
  h.append(internal::kChecksumPrefix);
  const size_t checksum_at = h.size();
  h.append(32, '0');
  h.append("\",");
  // tensor_checksums: a JSON array of strings inside a string, so its
  // quotes are escaped in the header; `tensor_sums` is the value itself, as
  // meta_checksum hashes it.
  AppendField(internal::kTensorChecksumsField, &h);
  h.append("\"[");
  std::string tensor_sums = "[";
  tensor_sums.reserve(2 + tensor_count * 44);
  std::vector<size_t> tensor_sum_at(tensor_count);    // in h
  std::vector<size_t> tensor_value_at(tensor_count);  // in tensor_sums
  for (size_t i = 0; i < tensor_count; ++i) {
    if (i > 0) {
      h.push_back(',');
      tensor_sums.push_back(',');
    }
    h.append("\\\"");
    h.append(internal::kChecksumPrefix);
    tensor_sum_at[i] = h.size();
    h.append(32, '0');
    h.append("\\\"");
    tensor_sums.push_back('"');
    tensor_sums.append(internal::kChecksumPrefix);
    tensor_value_at[i] = tensor_sums.size();
    tensor_sums.append(32, '0');
    tensor_sums.push_back('"');
  }
  h.append("]\",");
  tensor_sums.push_back(']');
  AppendField(internal::kMetaChecksumField, &h);
  h.push_back('"');
  h.append(internal::kChecksumPrefix);
  const size_t meta_checksum_at = h.size();
  h.append(32, '0');
  h.append("\"}");

  internal::MetaChecksumInput meta_input;
  meta_input.Reserve(448 + signature.size() + cache_types.size() + meta_states.size(),
                     tensor_count * 64);

  uint64_t offset = 0;
  size_t t = 0;
  for (size_t l = 0; l < layers; ++l) {
    const auto& states = layout.layers[l].states;
    for (size_t k = 0; k < states.size(); ++k, ++t) {
      const uint64_t bytes = states[k].ByteSize();
      if (req.tensors[t].size() != bytes) {
        return Status::InvalidArgument("tensor layer_" + std::to_string(l) + "_state_" +
                                       std::to_string(k) + " has " +
                                       std::to_string(req.tensors[t].size()) +
                                       " bytes, the layout needs " + std::to_string(bytes));
      }
      // The name, between the quotes after the comma.
      const size_t name_at = h.size() + 2;
      h.append(",\"layer_");
      AppendUint(l, &h);
      h.append("_state_");
      AppendUint(k, &h);
      const size_t name_size = h.size() - name_at;
      h.append("\":{\"dtype\":\"");
      h.append(DTypeName(states[k].dtype));
      h.append("\",\"shape\":[");
      for (size_t d = 0; d < states[k].shape.size(); ++d) {
        if (d > 0) h.push_back(',');
        AppendUint(states[k].shape[d], &h);
      }
      h.append("],\"data_offsets\":[");
      AppendUint(offset, &h);
      h.push_back(',');
      if (bytes > UINT64_MAX - offset) return Status::InvalidArgument("block size overflows");
      meta_input.AddTensor(std::string_view(h).substr(name_at, name_size),
                           DTypeName(states[k].dtype), states[k].shape, offset, offset + bytes);
      offset += bytes;
      AppendUint(offset, &h);
      h.append("]}");
    }
  }
  h.push_back('}');
  h.append((8 - h.size() % 8) % 8, ' ');
  if (h.size() > kMaxBlockHeaderBytes) {
    return Status::InvalidArgument("block header would be " + std::to_string(h.size()) +
                                   " bytes, over the limit of " +
                                   std::to_string(kMaxBlockHeaderBytes));
  }
  const uint64_t data_size = offset;
  const uint64_t header_end = 8 + h.size();
  if (data_size > SIZE_MAX - header_end) return Status::InvalidArgument("block size overflows");

  KVTIER_ASSIGN_OR_RETURN(BlockBuffer buf, BlockBuffer::Allocate(header_end + data_size));
  std::byte* out = buf.data();
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(n >> (8 * i));

  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  XXH3_state_t tensor_state;
  XXH128_canonical_t canonical;
  std::byte* dst = out + header_end;
  for (size_t i = 0; i < tensor_count; ++i) {
    const auto& src = req.tensors[i];
    XXH3_128bits_reset(&tensor_state);
    size_t done = 0;
    while (done < src.size()) {
      size_t len = std::min(kChunkBytes, src.size() - done);
      std::memcpy(dst, src.data() + done, len);
      internal::Xxh3Update128(&state, dst, len);
      internal::Xxh3Update128(&tensor_state, dst, len);
      dst += len;
      done += len;
    }
    XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(&tensor_state));
    internal::HexLower(canonical.digest, 16, h.data() + tensor_sum_at[i]);
    std::memcpy(tensor_sums.data() + tensor_value_at[i], h.data() + tensor_sum_at[i], 32);
  }
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(&state));
  internal::HexLower(canonical.digest, 16, h.data() + checksum_at);

  // The metadata in bytewise key order (meta_checksum itself excluded).
  const std::string_view checksum_text(h.data() + checksum_at - internal::kChecksumPrefix.size(),
                                       internal::kChecksumPrefix.size() + 32);
  std::array<std::pair<std::string_view, std::string_view>, 11> entries = {{
      {"kvtier_format", "1"},
      {"key", {key_hex, 64}},
      {"parent", {parent_hex, 64}},
      {"namespace", {ns_hex, 64}},
      {"token_count", token_text},
      {"layout_signature", signature},
      {"layer_cache_types", cache_types},
      {"layer_meta_states", meta_states},
      {"created_at", created_text},
      {"checksum", checksum_text},
      {internal::kTensorChecksumsField, tensor_sums},
  }};
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [k, v] : entries) meta_input.AddEntry(k, v);
  const std::array<uint8_t, 16> meta_checksum = meta_input.Digest();
  internal::HexLower(meta_checksum.data(), 16, h.data() + meta_checksum_at);
  std::memcpy(out + 8, h.data(), h.size());
  return buf;
}

}  // namespace kvtier
