// `kvtier verify PATH...`: checks block files (DESIGN.md §6).
//
// A PATH that is a disk-tier cache folder (or a symlink to one) is checked
// as a whole (CacheFolder::Verify, its index opened read-only): every block
// file as below, with the key its name gives, against its index row;
// foreign entries and rows whose file is gone are failures too. Any other
// folder (a cache's quarantine/, `synth --out` output) is walked: every entry
// under it, at any depth, in name order, is checked as a PATH given alone,
// a file named <key hex>.safetensors (or, as in quarantine/,
// <...>-<key hex>.safetensors) against the key its name gives unless --key
// is given; an empty folder has nothing that fails. Any other PATH must be a
// regular file (symlinks are not followed); it is read whole and decoded with every check of
// docs/block-format.md, plus the expected key (--key) and layout (--signature, or --layout which
// also pins every tensor's dtype and shape). Exit 0 iff every file is valid, 1 if any is not, 2 on
// bad arguments.
//
// Each file has one outcome: ok; adopt, a valid block file of a folder
// with no index row (what a kill -9 between a block's publish and its
// commit leaves: the next writer's open adopts it, so it heals itself and
// does not fail the run unless --strict); or fail. The last line counts
// each outcome.
//   --json: {"files":[{"path","ok","outcome","reason","message"}],
//   "summary":{"files","ok","adopt","failed"}}; reason is null for a valid
//   file with its row, no_index_row for adopt (ok is true: the file is
//   valid), else a BlockFileError name (docs/block-format.md) or one of
//   not_found, not_regular_file, file_too_large, io_error, or, for a cache
//   folder whose index.sqlite cannot be used, bad_index.
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string_view>

#include "command.h"
#include "folder_flags.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "progress.h"

namespace kvtier::cli {
namespace {

// The largest file worth reading: the 8-byte length, the largest header and
// the largest block a layout may describe (4 GiB).
constexpr uint64_t kMaxBlockFileBytes = 8 + kMaxBlockHeaderBytes + (uint64_t{4} << 30);

struct VerifyArgs {
  std::vector<std::string> paths;
  std::string key;
  std::string signature;
  std::string layout;
  uint32_t block_tokens = 0;
  CLI::Option* key_opt = nullptr;
  CLI::Option* signature_opt = nullptr;
  CLI::Option* layout_opt = nullptr;
  bool strict = false;
};

// A folder's valid block file whose index row is missing: adopted (the row
// rebuilt from the file) by the next open that reconciles.
constexpr std::string_view kNoIndexRow = "no_index_row";

enum class Outcome { kOk, kAdopt, kFail };

Outcome OutcomeOf(const std::string& reason) {
  if (reason.empty()) return Outcome::kOk;
  return reason == kNoIndexRow ? Outcome::kAdopt : Outcome::kFail;
}

struct FileVerdict {
  std::string path;
  std::string reason;  // empty: valid
  std::string message;
};

// What verify expects of every file.
struct Expectations {
  std::optional<BlockKey> key;
  std::optional<std::string> signature;
  std::optional<ModelLayout> layout;

  DecodeOptions Options() const {
    DecodeOptions o;
    if (key) o.expected_key = &*key;
    if (signature) o.expected_signature = &*signature;
    if (layout) o.expected_layout = &*layout;
    return o;
  }
};

Result<Expectations> BuildExpectations(const VerifyArgs& a) {
  Expectations e;
  if (a.key_opt->count() > 0) {
    e.key = BlockKey::FromHex(a.key);
    if (!e.key) return Status::InvalidArgument("--key: expected 64 hex digits");
  }
  if (a.signature_opt->count() > 0 && a.layout_opt->count() > 0) {
    return Status::InvalidArgument("give at most one of --signature or --layout");
  }
  if (a.signature_opt->count() > 0) e.signature = a.signature;
  if (a.layout_opt->count() > 0) {
    Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), a.layout, a.block_tokens);
    if (!layout.ok()) return layout.status().WithContext("--layout");
    e.signature = layout->Signature();
    e.layout = std::move(*layout);
  }
  return e;
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

// One file given alone or found under a folder.
FileVerdict VerifyFile(const std::string& path, const Expectations& expect) {
  FileVerdict v{path, "", ""};
  Env* env = Env::Default();
  Result<FileInfo> info = env->Stat(path);
  if (!info.ok()) {
    v.reason = info.status().IsNotFound() ? "not_found" : "io_error";
    v.message = info.status().message();
    return v;
  }
  if (info->type != FileType::kRegular) {
    v.reason = "not_regular_file";
    v.message = path + " is a " +
                std::string(info->type == FileType::kDirectory ? "folder"
                            : info->type == FileType::kSymlink ? "symlink"
                            : info->type == FileType::kFifo    ? "FIFO"
                                                               : "special file") +
                ", not a regular file";
    return v;
  }
  Result<std::vector<std::byte>> bytes = env->ReadWholeFile(path, kMaxBlockFileBytes);
  if (!bytes.ok()) {
    const Status& s = bytes.status();
    v.reason = s.IsInvalidArgument()     ? "not_regular_file"  // replaced since the Stat
               : s.IsResourceExhausted() ? "file_too_large"
               : s.IsNotFound()          ? "not_found"
                                         : "io_error";
    v.message = s.message();
    return v;
  }
  Result<DecodedBlock> block = DecodeBlock(*bytes, expect.Options());
  if (!block.ok()) {
    BlockFileError reason = BlockFileErrorOf(block.status());
    v.reason =
        reason == BlockFileError::kNone ? "invalid" : std::string(BlockFileErrorName(reason));
    v.message = Detail(block.status());
  }
  return v;
}

// The key a block file's name gives: "<64 hex>.safetensors", alone or
// after a '-' (quarantine/'s "<unix s>-<pid>-<n>-<original name>").
std::optional<BlockKey> KeyOfName(std::string_view name) {
  constexpr std::string_view kSuffix = ".safetensors";
  constexpr size_t kHex = 64;
  if (!name.ends_with(kSuffix) || name.size() < kHex + kSuffix.size()) return std::nullopt;
  const size_t start = name.size() - kSuffix.size() - kHex;
  if (start > 0 && name[start - 1] != '-') return std::nullopt;
  return BlockKey::FromHex(name.substr(start, kHex));
}

// Every entry under the folder `dir` (not a cache folder), depth first in
// name order; folders are walked, everything else is checked as a file.
Status VerifyTree(const std::string& dir, const Expectations& expect,
                  std::vector<FileVerdict>* out) {
  Env* env = Env::Default();
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dir));
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = JoinPath(dir, name);
    Result<FileInfo> info = env->Stat(path);
    if (info.ok() && info->type == FileType::kDirectory) {
      KVTIER_RETURN_IF_ERROR(VerifyTree(path, expect, out));
      continue;
    }
    Expectations e = expect;
    if (!e.key) e.key = KeyOfName(name);
    out->push_back(VerifyFile(path, e));
  }
  return Status::Ok();
}

bool IsFolder(const std::string& path) {
  Result<FileInfo> info = Env::Default()->Stat(path);
  return info.ok() && info->type == FileType::kDirectory;
}

int Run(const VerifyArgs& a, const CommonFlags& flags) {
  Result<Expectations> expect = BuildExpectations(a);
  if (!expect.ok()) return ReportError(flags, expect.status());

  // Each verdict is printed as it comes (a cache folder's stream through
  // CacheFolder::VerifyEach): memory does not grow with the files checked.
  uint64_t files = 0, ok = 0, adopt = 0, failed = 0;
  auto dump = [](const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (flags.json) std::cout << "{\"files\":[";
  auto emit = [&](const FileVerdict& v) {
    const Outcome o = OutcomeOf(v.reason);
    switch (o) {
      case Outcome::kOk:
        ++ok;
        break;
      case Outcome::kAdopt:
        ++adopt;
        break;
      case Outcome::kFail:
        ++failed;
        break;
    }
    if (flags.json) {
      nlohmann::json f = {{"path", v.path},
                          {"ok", o != Outcome::kFail},
                          {"outcome", o == Outcome::kOk      ? "ok"
                                      : o == Outcome::kAdopt ? "adopt"
                                                             : "fail"}};
      f["reason"] = v.reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.reason);
      f["message"] = v.message;
      std::cout << (files ? "," : "") << dump(f);
    } else {
      switch (o) {
        case Outcome::kOk:
          std::cout << "OK     " << v.path << "\n";
          break;
        case Outcome::kAdopt:
          std::cout << "ADOPT  " << v.path << ": " << v.reason << ": " << v.message << "\n";
          break;
        case Outcome::kFail:
          std::cout << "FAIL   " << v.path << ": " << v.reason << ": " << v.message << "\n";
          break;
      }
    }
    ++files;
  };
  for (const std::string& path : a.paths) {
    if (CacheFolder::Exists(Env::Default(), path)) {
      CacheVerifyOptions co;
      if (expect->signature) co.signature = &*expect->signature;
      if (expect->layout) co.layout = &*expect->layout;
      // Its walk on stderr when the verdicts do not go to the terminal.
      UnitProgress progress(ProgressBesideOutput(flags.json));
      auto opened = OpenCacheFolder(path, CacheFolderAccess::kReadOnly, &progress);
      Status folder =
          opened.ok() ? (*opened)->VerifyEach(
                            co,
                            [&](CacheFileVerdict v) {
                              emit({std::move(v.path), std::move(v.reason), std::move(v.message)});
                            })
                      : opened.status();
      progress.Finish();
      if (!folder.ok()) {
        // Corruption here is the index itself (not a regular file, or not
        // SQLite: its message names which); the rest is the file system.
        emit({path, folder.IsCorruption() ? "bad_index" : "io_error", folder.message()});
      }
      continue;
    }
    if (IsFolder(path)) {
      std::vector<FileVerdict> walked;
      if (Status s = VerifyTree(path, *expect, &walked); !s.ok()) {
        walked.push_back({path, s.IsNotFound() ? "not_found" : "io_error", s.message()});
      }
      for (const FileVerdict& v : walked) emit(v);
      continue;
    }
    emit(VerifyFile(path, *expect));
  }
  const bool all_ok = failed == 0 && (!a.strict || adopt == 0);
  if (flags.json) {
    std::cout << "],\"summary\":"
              << dump({{"files", files}, {"ok", ok}, {"adopt", adopt}, {"failed", failed}})
              << "}\n";
  } else {
    std::cout << files << " files: " << ok << " ok, " << adopt
              << " to adopt (valid, no index row yet: the next open adopts them"
              << (a.strict ? "; --strict fails on them" : "") << "), " << failed << " failed\n";
  }
  std::cout.flush();
  return all_ok ? kExitOk : kExitFailure;
}

std::function<int()> SetupVerify(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<VerifyArgs>();
  app->add_option("paths", a->paths,
                  "Block files, cache folders, or folders of block files (walked) to check")
      ->required();
  a->key_opt = app->add_option("--key", a->key, "Key (64 hex digits) every file must hold");
  a->signature_opt =
      app->add_option("--signature", a->signature, "Layout signature every file must have");
  a->layout_opt = app->add_option("--layout", a->layout,
                                  "Layout preset or .json file every file must match exactly");
  app->add_option("--block-tokens", a->block_tokens, "Tokens per block for --layout")
      ->check(CLI::Range(uint32_t{1}, UINT32_MAX));
  app->add_flag("--strict", a->strict,
                "Fail also on valid files of a folder with no index row (outcome adopt)");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(verify, "verify", "Check block files; exit 0 iff all are valid", SetupVerify);
}  // namespace kvtier::cli
