// CacheFolder: a disk-tier cache folder seen from outside any DiskTier:
// what tools (`kvtier ls`, `stats`, `gc`, `verify DIR`) need to look after
// a folder shared by DiskTiers in any number of processes: index rows,
// blocks and bytes per layout signature, the files found (blocks, writers'
// temp files, foreign entries, quarantined files), a garbage-collection
// plan and its application, a verdict for every block file.
//
// Opened kReadOnly (the default) it writes nothing (no index, journal or
// lock file), so a folder the caller may only read can be inspected
// (docs/disk-tier.md); ApplyGc needs kReadWrite. Open never creates a
// cache folder: a path that is not one is kNotFound; a symlink to one is.
//
// Thread safety: the methods may be called from several threads at once;
// each reads the folder afresh (the index through its own connection).
#ifndef KVTIER_CACHE_FOLDER_H_
#define KVTIER_CACHE_FOLDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier {

namespace disk {
class DiskIndex;
class FolderLock;
struct IndexRow;
}  // namespace disk

enum class CacheFolderAccess {
  kReadOnly,   // inspection only: nothing in the folder is written
  kReadWrite,  // also ApplyGc
};

struct CacheFolderOptions {
  std::string dir;  // the cache folder, or a symlink to it
  CacheFolderAccess access = CacheFolderAccess::kReadOnly;
  // How long an index read or write waits while another process holds the
  // index's write lock, in milliseconds (default 10 s).
  uint32_t busy_timeout_ms = 10'000;
  // How far a long call has come, for a progress bar: `done` of `total`
  // `unit`s. ForEachFile (and Scan, Verify, VerifyEach and Gc, which walk
  // with it) calls it as each entry of blocks/ is finished ("subfolders");
  // Gc's budget pass as it evicts ("bytes over the budget"). Called on the
  // calling thread; empty: never called.
  std::function<void(const char* unit, uint64_t done, uint64_t total)> progress;
};

// One index row.
struct CacheFolderEntry {
  BlockKey key;
  std::string signature;       // the block's layout signature
  uint64_t bytes = 0;          // file size
  int64_t created_at_us = 0;   // unix µs, when the block was stored
  int64_t last_access_us = 0;  // unix µs
};

// What a walk of blocks/ and quarantine/ finds.
struct CacheFolderScan {
  struct File {
    std::string path;
    uint64_t bytes = 0;            // 0 for anything but a regular file
    uint64_t allocated_bytes = 0;  // what it takes from the disk (st_blocks × 512)
    int64_t mtime_unix_s = 0;
    std::optional<BlockKey> key;  // blocks and temp files
    int pid = 0;                  // temp files: the writer's process id
  };
  std::vector<File> blocks;      // <64 hex>.safetensors in the right subfolder
  std::vector<File> temps;       // writers' temp files
  std::vector<File> foreign;     // anything else under blocks/
  std::vector<File> quarantine;  // everything in quarantine/
  // Which list a file belongs to (CacheFolder::ForEachFile).
  enum class Kind { kBlock, kTemp, kForeign, kQuarantine };
};

// What `kvtier gc` removes, applied in this order.
struct CacheGcRequest {
  // Remove blocks written more than this many seconds ago (any value > 0;
  // one larger than the clock can reach expires nothing).
  std::optional<int64_t> retention_seconds;
  // Remove the blocks of every signature but this one.
  std::optional<std::string> keep_signature;
  // Evict least-recently-accessed blocks (all signatures, block files with
  // no row included) until they take at most this many bytes of disk, as
  // the file system allocates them.
  std::optional<uint64_t> max_bytes;
  bool quarantine = true;  // remove quarantined files
  bool dead_temps = true;  // remove temp files whose writer is gone
};

struct CacheGcItem {
  std::string path;
  // missing_file (a row whose file is gone), expired, other_layout,
  // over_budget, quarantined, dead_temp, foreign (anything else under
  // blocks/), invalid_orphan (a block file with no row whose header does
  // not verify).
  std::string reason;
  uint64_t bytes = 0;  // file length
};

// A verdict on one block file, foreign entry or file-less row.
struct CacheFileVerdict {
  std::string path;
  // Empty for a valid block; else a BlockFileError name
  // (docs/block-format.md) or one of not_found, io_error, no_index_row,
  // size_mismatch, header_changed, foreign_file, missing_file,
  // index_corrupt.
  std::string reason;
  std::string message;
};

struct CacheVerifyOptions {
  const std::string* signature = nullptr;  // if set, every block must have it
  const ModelLayout* layout = nullptr;     // if set, ... and exactly its tensors
};

class CacheFolder {
 public:
  // True if `dir` (or what a symlink `dir` points to) is a folder holding
  // index.sqlite or blocks/.
  static bool Exists(Env* env, const std::string& dir);

  // kNotFound (naming the path) if `options.dir` is not a cache folder.
  // An index.sqlite (or -wal, -shm) that is not a regular file, or not a
  // SQLite database, is Corruption naming its path; opened kReadWrite, the
  // folder is then taken alone (Unavailable if a DiskTier or another
  // CacheFolder has it open), the index set aside into quarantine/ and a
  // new one started, which ApplyGc fills by adopting the block files. A
  // kReadWrite folder holds the folder lock shared while it is open, as a
  // DiskTier does. On a disk too full for SQLite to open the index for
  // writing (it needs room for its -shm and -wal files), a kReadWrite
  // folder reads it, and ApplyGc opens it for writing once it has freed
  // space by removing files.
  // REQUIRES: `env` outlives the CacheFolder.
  static Result<std::unique_ptr<CacheFolder>> Open(const CacheFolderOptions& options, Env* env);
  ~CacheFolder();
  CacheFolder(const CacheFolder&) = delete;
  CacheFolder& operator=(const CacheFolder&) = delete;

  const std::string& dir() const { return options_.dir; }

  // Every index row, in key order.
  Result<std::vector<CacheFolderEntry>> ListEntries();
  // Calls `fn` for every index row, oldest access first (ties in key
  // order), reading a bounded batch at a time: memory does not grow with
  // the folder (`kvtier ls` streams through it). Rows written or removed
  // while it runs may or may not be seen.
  Status ForEachEntryByAccess(const std::function<void(const CacheFolderEntry&)>& fn);
  // Blocks and bytes per signature that has blocks, sorted by signature
  // (`compatible` left false).
  Result<std::vector<SignatureUsage>> PerSignature();
  // The folder's files, each list sorted by path.
  Result<CacheFolderScan> Scan();
  // Scan()'s files one at a time, in the same order (blocks/ subfolder by
  // subfolder, then quarantine/), holding one subfolder's names at a time:
  // memory does not grow with the folder (`kvtier stats` counts through
  // it). An error ends the walk.
  Status ForEachFile(
      const std::function<void(CacheFolderScan::Kind, const CacheFolderScan::File&)>& fn);

  // `kvtier gc` in one walk whose memory does not grow with the folder:
  // quarantined files; then blocks/ one subfolder at a time, with that
  // subfolder's index rows (rows whose file is gone: missing_file; expired;
  // other_layout; dead temps; foreign entries; block files with no row
  // whose header does not verify: invalid_orphan; valid ones are adopted
  // into the index, or in a dry run counted as blocks); then, while the
  // blocks take more than max_bytes, the least recently accessed
  // (over_budget). Each item goes to `fn` once decided and, unless
  // `dry_run`, removed (files before their rows, rows deleted and orphans
  // adopted a chunk at a time, so that a full disk is freed before the
  // index grows). Returns the bytes freed (0 on a dry run). A dry run works
  // on a folder opened read-only; applying needs kReadWrite
  // (kFailedPrecondition). Stops at the first error; what was removed
  // before it stays removed.
  Result<uint64_t> Gc(const CacheGcRequest& req, bool dry_run,
                      const std::function<void(const CacheGcItem&)>& fn);
  // Gc's items of a dry run, in a list.
  Result<std::vector<CacheGcItem>> PlanGc(const CacheGcRequest& req);
  // Removes the planned items, files before rows so that it needs no disk
  // space before it has freed some: first everything without a row
  // (quarantined, temp, foreign, invalid files), then blocks, a chunk at a
  // time, their files and then their rows in one transaction (a crash or a
  // failed commit leaves rows without a file: misses, dropped by the next
  // commit, never orphan files). Then it adopts every valid block file that
  // has no row and was not planned away, so that a limit holds for every
  // file. Returns the bytes freed (file lengths); stops at the first error.
  // kFailedPrecondition if the folder was opened read-only.
  Result<uint64_t> ApplyGc(const std::vector<CacheGcItem>& plan);

  // Reads every block file whole and decodes it with every check of
  // docs/block-format.md, the key its name gives and `opts`; then compares
  // it with its index row (size and header hash). Foreign entries and rows
  // without a file get verdicts too.
  Result<std::vector<CacheFileVerdict>> Verify(const CacheVerifyOptions& opts);
  // Verify's verdicts one at a time, in the same order (block files by
  // path, then foreign entries, then rows whose file is gone), reading the
  // index one blocks/ subfolder's rows at a time: memory grows with one
  // subfolder, not with the folder (`kvtier verify` streams through it).
  // An error ends the walk (verdicts given before it stand).
  Status VerifyEach(const CacheVerifyOptions& opts,
                    const std::function<void(CacheFileVerdict)>& fn);

 private:
  CacheFolder(const CacheFolderOptions& options, Env* env, std::unique_ptr<disk::DiskIndex> index,
              std::unique_ptr<disk::FolderLock> lock);
  // Block files of the scan with no row (`rows` holds the keys with one).
  Status AdoptOrphans(const CacheFolderScan& scan, const std::vector<CacheGcItem>& plan);

  // Opens the index for writing if Open() could only read it (a full disk).
  Status EnsureWritableIndex();
  // Upserts the rows of `rows` whose file is still in place (a tier may have
  // evicted it since they were read) and empties `rows`: gc's adoption of
  // valid block files with no row.
  Status AdoptInPlace(std::vector<disk::IndexRow>* rows);

  const CacheFolderOptions options_;
  Env* const env_;
  std::unique_ptr<disk::DiskIndex> index_;        // replaced once by EnsureWritableIndex
  bool index_read_only_ = false;                  // kReadWrite, opened read-only: the disk was full
  const std::unique_ptr<disk::FolderLock> lock_;  // kReadWrite: shared, while open
};

}  // namespace kvtier

#endif  // KVTIER_CACHE_FOLDER_H_
