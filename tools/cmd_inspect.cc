// `kvtier inspect FILE`: a block file's metadata and tensor list.
//
// The file must pass every structural check of docs/block-format.md and
// its meta_checksum when it has one (an edited header is not shown as if it
// were what the writer wrote); the data checksum is computed and reported
// ("checksum_ok") rather than required, so a block with damaged data can
// still be looked at. Exit 0 if the file is valid,
// 1 if it is not (structure or checksum), 2 on bad arguments.
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "command.h"
#include "kvtier/block_file.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"

namespace kvtier::cli {
namespace {

constexpr uint64_t kMaxBlockFileBytes = 8 + kMaxBlockHeaderBytes + (uint64_t{4} << 30);

std::string Hex(const std::array<uint8_t, 16>& a) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : a) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// The status message without the "block file rejected [reason]: " marker
// (the reason is printed on its own).
std::string Detail(const Status& s) {
  const std::string& m = s.message();
  constexpr std::string_view kMarker = "block file rejected [";
  size_t at = m.find(kMarker);
  if (at == std::string::npos) return m;
  size_t close = m.find("]: ", at);
  if (close == std::string::npos) return m;
  return m.substr(0, at) + m.substr(close + 3);
}

struct InspectArgs {
  std::string path;
};

int Run(const InspectArgs& a, const CommonFlags& flags) {
  Result<std::vector<std::byte>> bytes = Env::Default()->ReadWholeFile(a.path, kMaxBlockFileBytes);
  if (!bytes.ok()) return ReportError(flags, bytes.status());
  DecodeOptions opts;
  opts.verify_checksum = false;
  Result<DecodedBlock> block = DecodeBlock(*bytes, opts);
  if (!block.ok()) {
    std::string reason(BlockFileErrorName(BlockFileErrorOf(block.status())));
    if (flags.json) {
      PrintJson({{"path", a.path},
                 {"ok", false},
                 {"reason", reason},
                 {"message", Detail(block.status())}});
    } else {
      std::cout << a.path << ": invalid: " << reason << ": " << Detail(block.status()) << "\n";
    }
    return kExitFailure;
  }
  const DecodedBlock& b = *block;
  const BlockMeta& m = b.meta;
  const bool checksum_ok = BlockChecksum(b.data) == m.checksum;

  if (flags.json) {
    nlohmann::json tensors = nlohmann::json::array();
    uint64_t offset = 0;
    for (const TensorView& t : b.tensors) {
      tensors.push_back({{"name", t.name},
                         {"dtype", std::string(DTypeName(t.dtype))},
                         {"shape", t.shape},
                         {"data_offsets", {offset, offset + t.data.size()}}});
      offset += t.data.size();
    }
    nlohmann::json j = {
        {"path", a.path},
        {"ok", checksum_ok},
        {"reason", checksum_ok ? nlohmann::json(nullptr) : nlohmann::json("checksum_mismatch")},
        {"file_bytes", bytes->size()},
        {"header_bytes", b.header_bytes},
        {"data_bytes", b.data.size()},
        {"checksum_ok", checksum_ok},
        {"metadata",
         {{"kvtier_format", "1"},
          {"key", m.key.Hex()},
          {"parent", m.parent.Hex()},
          {"namespace", m.ns.Hex()},
          {"token_count", m.token_count},
          {"layout_signature", m.layout_signature},
          {"layer_cache_types", m.layer_cache_types},
          {"layer_meta_states", m.layer_meta_states},
          {"created_at", m.created_at},
          {"checksum", "xxh3-128:" + Hex(m.checksum)},
          {"meta_checksum", m.meta_checksum ? nlohmann::json("xxh3-128:" + Hex(*m.meta_checksum))
                                            : nlohmann::json(nullptr)}}},
        {"tensors", std::move(tensors)}};
    PrintJson(j);
  } else {
    std::ostringstream out;
    out << a.path << ": " << bytes->size() << " bytes (header " << b.header_bytes << ", data "
        << b.data.size() << ")\n"
        << "  key               " << m.key.Hex() << "\n"
        << "  parent            " << m.parent.Hex() << "\n"
        << "  namespace         " << m.ns.Hex() << "\n"
        << "  token_count       " << m.token_count << "\n"
        << "  layout_signature  " << m.layout_signature << "\n"
        << "  created_at        " << m.created_at << "\n"
        << "  checksum          xxh3-128:" << Hex(m.checksum)
        << (checksum_ok ? " (ok)" : " (MISMATCH)") << "\n"
        << "  meta_checksum     "
        << (m.meta_checksum ? "xxh3-128:" + Hex(*m.meta_checksum) + " (ok)"
                            : std::string("none (written before meta_checksum existed)"))
        << "\n"
        << "  layers            " << m.layer_cache_types.size() << "\n";
    for (size_t l = 0; l < m.layer_cache_types.size(); ++l) {
      out << "    layer " << l << ": " << m.layer_cache_types[l];
      if (!m.layer_meta_states[l].empty()) {
        out << " (meta:";
        for (const std::string& s : m.layer_meta_states[l]) out << " " << nlohmann::json(s).dump();
        out << ")";
      }
      out << "\n";
    }
    out << "  tensors           " << b.tensors.size() << "\n";
    uint64_t offset = 0;
    for (const TensorView& t : b.tensors) {
      out << "    " << std::left << std::setw(20) << t.name << " " << std::setw(8)
          << DTypeName(t.dtype) << " " << std::setw(16) << ShapeText(t.shape) << " [" << offset
          << ", " << offset + t.data.size() << ")\n";
      offset += t.data.size();
    }
    std::cout << out.str();
  }
  std::cout.flush();
  return checksum_ok ? kExitOk : kExitFailure;
}

std::function<int()> SetupInspect(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<InspectArgs>();
  app->add_option("file", a->path, "Block file")->required();
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(inspect, "inspect", "Print a block file's metadata and tensor list", SetupInspect);
}  // namespace kvtier::cli
