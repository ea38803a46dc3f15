// BlockVerifier: checks many block files of one shape (one model, one
// layout) with DecodeBlock's verdict, without re-parsing a header whose shape
// it has fully decoded before.
//
// Headers of blocks of one model and layout differ only in the values of
// `key`, `parent` (64 hex digits each), `created_at` (decimal),
// `checksum` and `meta_checksum` ("xxh3-128:" + 32 hex digits), and the 32
// hex digits of each entry of `tensor_checksums` (whose value, JSON in a
// string, the file holds escaped: the template's range is those escaped
// bytes, which must be exactly the encoder's form). A *template* is a header
// DecodeBlock fully accepted: a copy of its first 8 + N bytes and the byte
// ranges of those six values. A file takes the fast path when
// it has the template's size, every header byte outside the ranges equals
// the template's, and each range holds a valid token of its kind (the one
// DecodeBlock accepts for that field). Its JSON then has the template's
// structure with only those values changed, so every structural rule holds
// as it did for the template; what depends on the values is checked per
// file: the expected key, the expected signature (the template's), the
// meta_checksum recomputed over the file's values and, when asked, the data
// checksum. Anything that does not match exactly goes through DecodeBlock,
// which gives the verdict (and, on success, installs the header as a
// template). So the fast path never produces an error of its own.
//
// Headers without meta_checksum or tensor_checksums (written before they
// existed) take the fast path too: their template has no meta_checksum range and nothing to
// recompute. A header whose five values are not all unescaped JSON strings
// makes no template. Calls with DecodeOptions::expected_layout set go
// through DecodeBlock and install nothing, except in a verifier made for
// that layout (below).
//
// DecodeHeader is DecodeBlockHeader's verdict and result the same way, for
// a reader that holds only a file's header (a partial read) or does not
// verify the data again (the pool, given a block the store verified): a
// header of a held shape is answered with the template's decode (its tensor
// table and every field outside the ranges, which are the file's own bytes)
// and this file's values in the six fields, parsed as DecodeBlock parses
// them. Verify and DecodeHeader share the templates. Decode is
// DecodeBlock's verdict and result: DecodeHeader's, then the data views and,
// when asked, the data checksum.
//
// A verifier made for one layout (BlockVerifier(layout)) also answers
// DecodeHeader and Decode calls whose expected_layout equals it from
// templates that a decode with that layout installed: the layout check reads
// only the tensor table, the cache types and token_count, all outside the
// ranges, so a file of the template's shape passes it as the template did.
//
// CopyVerify copies a file into a buffer of the caller's and gives Verify's
// verdict on the copy (never on the source, which another process may be
// writing: a shared arena). It copies in chunks of kCopyChunk bytes and
// feeds each chunk's part of the data section to the data checksum right
// after copying it, while the chunk is in cache, so the bytes are read once
// from memory; the fast path compares that hash, and every other case
// (no template, a mismatch) goes to DecodeBlock over the copy, as Verify.
// A file of one chunk or less is copied whole, then verified as Verify
// does (the copy is in cache; a one-shot hash costs less than a stream's
// setup).
//
// Up to kMaxTemplates templates are kept, replaced round-robin, so a partial
// last block (another token_count) or a created_at of another digit count
// does not evict the common shape.
//
// Thread safety: Verify may be called from any number of threads at once.
// One mutex guards the template slots; a caller copies the slots out under
// it and matches and hashes without it. The fast path allocates nothing.
#ifndef KVTIER_CORE_BLOCK_VERIFIER_H_
#define KVTIER_CORE_BLOCK_VERIFIER_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_file.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier {

// What a caller may need from a file Verify accepted.
struct VerifiedBlockInfo {
  int64_t created_at = 0;          // the header's created_at
  bool has_meta_checksum = false;  // false for files written before it existed
  uint64_t header_bytes = 0;       // N, the JSON length (padded)
};

class BlockVerifier {
 public:
  static constexpr size_t kMaxTemplates = 4;
  // CopyVerify's chunk: well inside a core's L2 (1 MiB on the machine it
  // was measured on), so the hash reads what the copy just wrote from cache.
  static constexpr size_t kCopyChunk = size_t{128} << 10;

  BlockVerifier() = default;
  // A verifier that also takes the fast path for calls expecting `layout`.
  explicit BlockVerifier(ModelLayout layout);
  BlockVerifier(const BlockVerifier&) = delete;
  BlockVerifier& operator=(const BlockVerifier&) = delete;
  ~BlockVerifier();

  // The verdict of DecodeBlock(file, opts): OK exactly when DecodeBlock
  // succeeds, otherwise DecodeBlock's own Status (code, BlockFileError,
  // message). On OK, `*info` (when not null) describes the file.
  // ResourceExhausted if memory runs out while decoding.
  Status Verify(std::span<const std::byte> file, const DecodeOptions& opts,
                VerifiedBlockInfo* info = nullptr);

  // Copies `src` into `dst` and returns Verify(dst.first(src.size()), opts,
  // info)'s verdict (see CopyVerify above). InvalidArgument when `dst` is
  // smaller than `src` (nothing copied).
  Status CopyVerify(std::span<const std::byte> src, std::span<std::byte> dst,
                    const DecodeOptions& opts, VerifiedBlockInfo* info = nullptr);

  // DecodeBlockHeader(prefix, file_size, opts)'s verdict and result, the
  // same Status on failure (opts.verify_checksum plays no part: there is no
  // data). `prefix` holds at least the first 8 + N bytes of the file.
  // ResourceExhausted if memory runs out while decoding.
  Result<DecodedBlock> DecodeHeader(std::span<const std::byte> prefix, uint64_t file_size,
                                    const DecodeOptions& opts);

  // DecodeBlock(file, opts)'s verdict and result, the same Status on failure.
  Result<DecodedBlock> Decode(std::span<const std::byte> file, const DecodeOptions& opts);

  // The layout it was made for; null for a verifier of any.
  const ModelLayout* layout() const { return layout_ ? &*layout_ : nullptr; }

  // Calls answered from a template, and calls that ran DecodeBlock (for
  // tests and stats).
  uint64_t fast_path_hits() const { return fast_path_hits_.load(std::memory_order_relaxed); }
  uint64_t full_decodes() const { return full_decodes_.load(std::memory_order_relaxed); }
  // Templates held now (at most kMaxTemplates).
  size_t template_count() const;

 private:
  struct Template;
  using TemplateSlots = std::array<std::shared_ptr<const Template>, kMaxTemplates>;
  enum class AfterDecode { kKeepNothing, kInstallTemplate };
  // A data checksum computed already: BlockChecksum of the file's bytes
  // from `begin` to its end.
  struct KnownDataSum {
    uint64_t begin = 0;
    std::array<uint8_t, 16> sum{};
  };

  Status VerifyImpl(std::span<const std::byte> file, const DecodeOptions& opts,
                    const KnownDataSum* known, VerifiedBlockInfo* info);

  Status FullDecode(std::span<const std::byte> file, const DecodeOptions& opts, AfterDecode after,
                    VerifiedBlockInfo* info);
  Result<DecodedBlock> FullDecodeHeader(std::span<const std::byte> prefix, uint64_t file_size,
                                        const DecodeOptions& opts, AfterDecode after,
                                        bool layout_checked);
  // The held templates (copied under the lock).
  TemplateSlots Slots() const;
  // Adds `t` unless a template of the same shape is already held.
  void Install(std::shared_ptr<const Template> t);

  const std::optional<ModelLayout> layout_;
  mutable Mutex mu_;
  TemplateSlots templates_ GUARDED_BY(mu_);
  size_t next_slot_ GUARDED_BY(mu_) = 0;  // round-robin replacement
  std::atomic<uint64_t> fast_path_hits_{0};
  std::atomic<uint64_t> full_decodes_{0};
};

}  // namespace kvtier

#endif  // KVTIER_CORE_BLOCK_VERIFIER_H_
