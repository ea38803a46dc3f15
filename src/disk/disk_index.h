// DiskIndex: the SQLite index of a cache folder (<dir>/index.sqlite): the
// row store.
//
// One row per block file: key (32-byte blob), layout signature (an id into
// the `signatures` table), file size, creation and last-access times (unix
// µs) and the hash of the file's header (header_hash.h). Triggers keep
// per-signature block and byte totals in the `signatures` table inside the
// same transaction as the row change, so every process sharing the folder
// reads the same accounting with one small query. WAL mode; every write is
// one BEGIN IMMEDIATE transaction; SQLITE_BUSY is waited on for
// busy_timeout_ms, then reported as kUnavailable.
//
// It stores rows and answers queries about them (including the oldest rows
// an eviction asks for, in a WriteTransaction); what to evict, and when, is
// Capacity's decision (capacity.h).
//
// Connections come from a pool: a call takes one (opening a new one outside
// the lock when none is free), uses it without any lock held, and returns it.
// A connection that found the file damaged is closed on return and
// reported (IndexOptions::on_corruption); Rebuild() puts a new file in
// place under the same object.
//
// Thread safety: all methods may be called from many threads at once. One
// mutex guards the connection pool, the count of connections on lease (a
// Rebuild() waits for none) and the signature-id cache; no SQLite call runs
// under it.
#ifndef KVTIER_DISK_DISK_INDEX_H_
#define KVTIER_DISK_DISK_INDEX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "disk/index_fork_guard.h"
#include "disk/sqlite_db.h"
#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier::disk {

inline constexpr int64_t kIndexSchemaVersion = 1;

struct IndexRow {
  BlockKey key;
  int64_t sig_id = 0;
  uint64_t size = 0;
  int64_t created_at_us = 0;   // unix µs
  int64_t last_access_us = 0;  // unix µs
  uint64_t header_hash = 0;    // HeaderHash() of the file; 0 = not recorded
};

struct IndexTotals {
  uint64_t entries = 0;
  uint64_t bytes = 0;  // file lengths
  // What the files take from the disk, estimated for an allocation unit
  // (AllocatedEstimate, per signature): equal to `bytes` for a unit of 1.
  uint64_t allocated = 0;
};

// `blocks` files of `bytes` in all, each taking whole allocation units:
// blocks × (their mean size rounded up to the unit). Exact for files of one
// size, as a layout's block files are; within one unit per file otherwise.
uint64_t AllocatedEstimate(uint64_t blocks, uint64_t bytes, uint64_t unit);
// One file of `bytes`, rounded up to the allocation unit.
inline uint64_t AllocatedEstimate(uint64_t bytes, uint64_t unit) {
  return AllocatedEstimate(1, bytes, unit);
}

struct SignatureTotals {
  int64_t sig_id = 0;
  std::string signature;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
};

struct IndexOptions {
  uint32_t busy_timeout_ms = 10'000;
  bool synchronous_full = false;  // PRAGMA synchronous=FULL instead of NORMAL
  bool create_if_missing = true;  // false: kNotFound if there is no index file
  // Only read (`kvtier ls`, `stats`, `verify DIR`): connections open with
  // SQLITE_OPEN_READONLY, nothing is created (implies !create_if_missing),
  // the journal mode and schema are read, never set, and a folder this
  // process cannot write (read-only mount, another user's copy) is opened
  // immutable (sqlite_db.h). Every write method then fails with kIOError.
  bool read_only = false;
  // Called with the status when a call found the file damaged (SQLite said
  // CORRUPT or NOTADB), at any time after Open(), from the calling thread
  // with no lock held; the connection that saw it is closed, not reused.
  // nullptr = none.
  std::function<void(const Status&)> on_corruption;
};

// The access times of rows being written.
enum class AccessTimes : uint8_t {
  // As given (a reconcile adopting a file dates it by its mtime).
  kAsGiven,
  // Fresh accesses (a write): each row's time becomes max(its own, one
  // more than the newest access time in the index), so the order eviction
  // follows survives wall-clock steps (Touch() does the same).
  kFresh,
};

class DiskIndex {
 public:
  class WriteTransaction;

  // Opens or creates the index at `path` and its schema. Corruption if the
  // file is not a usable SQLite database; FailedPrecondition if its schema
  // is newer than this build's.
  static Result<std::unique_ptr<DiskIndex>> Open(const std::string& path,
                                                 const IndexOptions& options);
  ~DiskIndex();

  // The id of `signature`, inserting it if new (cached); read-only:
  // NotFound if it is new.
  Result<int64_t> SignatureId(std::string_view signature);
  // Totals per signature that has blocks, sorted by signature.
  Result<std::vector<SignatureTotals>> PerSignature();
  // `allocated` estimated for files taking whole units of `alloc_unit` bytes.
  Result<IndexTotals> Totals(uint64_t alloc_unit = 1);

  Result<std::optional<IndexRow>> Lookup(const BlockKey& key);
  // Lookup() of every key with one query per up to 256 keys; result i is
  // the row of keys[i] (keys may repeat).
  Result<std::vector<std::optional<IndexRow>>> LookupMany(std::span<const BlockKey> keys);
  // Inserts or replaces rows in one transaction. A replaced row keeps the
  // later of the two access times.
  Status Upsert(std::span<const IndexRow> rows, AccessTimes times = AccessTimes::kAsGiven);
  // Whether a row still describes the file at its key's path.
  using FileCheck = std::function<bool(const IndexRow&)>;
  // Upsert() of the rows for which `describes_file` holds, asked inside the
  // write transaction; result i is whether rows[i] was written. An eviction
  // (the only thing that removes an indexed block's file) holds the same
  // write lock, so a file found by the check is the one the row describes
  // when it commits: a row read or computed earlier cannot overwrite the row
  // of a file another process has put in place since.
  Result<std::vector<bool>> UpsertIf(std::span<const IndexRow> rows,
                                     const FileCheck& describes_file,
                                     AccessTimes times = AccessTimes::kAsGiven);
  // Replaces the row of `old_row.key` by `new_row` only if it still
  // describes the same file as `old_row` (SameFile): a reader that found a
  // valid block file of another writer in place of the one the row
  // describes. True if it replaced the row.
  Result<bool> ReplaceIfSame(const IndexRow& old_row, const IndexRow& new_row);
  // Marks the row of `row.key` accessed at `at_us` (as Touch()) if that
  // row still describes the same file (SameFile), in a write transaction:
  // true if it did. A writer uses it to confirm that a block it finds
  // indexed is not being evicted at this moment (an eviction holds the
  // write lock from choosing its victims until their rows are gone).
  Result<bool> TouchIfPresent(const IndexRow& row, int64_t at_us);
  // TouchIfPresent() of every row in one transaction; result i for rows[i].
  Result<std::vector<bool>> TouchIfPresentMany(std::span<const IndexRow> rows, int64_t at_us);
  // Records accesses, one transaction: each row's last-access time becomes
  // at least max(the given time, one more than the newest access time in
  // the index, one more than the touch before it), never lower than it was:
  // an access recorded now is the newest even after the wall clock stepped
  // back (AccessTimes::kFresh).
  Status Touch(std::span<const std::pair<BlockKey, int64_t>> touches);
  // Deletes rows; returns how many existed.
  Result<uint64_t> Delete(std::span<const BlockKey> keys);
  // Deletes the row of `row.key` only if it still describes the same file
  // (size, creation time, header hash): a reader that found `row`'s file
  // gone or bad must not drop the row of a file another process has
  // written since. True if it deleted the row.
  Result<bool> DeleteIfSame(const IndexRow& row);
  // Deletes every row; returns how many there were.
  Result<uint64_t> DeleteAll();

  // Rows whose key starts with byte `prefix` (one blocks/ subfolder).
  Result<std::vector<IndexRow>> RowsWithPrefix(uint8_t prefix);
  // Calls `fn` for every row in key order, `batch` rows per read snapshot.
  Status ForEachRow(const std::function<void(const IndexRow&)>& fn, uint32_t batch = 1024);
  // Calls `fn` for every row, oldest access first (ties in key order),
  // `batch` rows per read snapshot: memory bounded by `batch` whatever the
  // index holds.
  Status ForEachRowByAccess(const std::function<void(const IndexRow&)>& fn, uint32_t batch = 1024);
  // Rows in LRU order (oldest access first), at most `limit`.
  Result<std::vector<IndexRow>> LruRows(uint32_t limit);
  // The signature text of an id ("" if unknown).
  Result<std::string> SignatureText(int64_t sig_id);

  // A write transaction (BEGIN IMMEDIATE, so the write lock is held from
  // the first read to the commit) for a caller whose reads and deletes must
  // see no other writer in between: eviction (capacity.h) chooses its
  // victims and removes their files and rows under it.
  Result<WriteTransaction> BeginWrite();

  // PRAGMA integrity_check: "ok" or SQLite's findings.
  Result<std::string> IntegrityCheck();
  // PRAGMA quick_check (the same checks but indexes against their tables:
  // O(pages)): "ok" or SQLite's findings.
  Result<std::string> QuickCheck();

  // Replaces the index file by a new, empty one: stops handing out
  // connections, waits (at most busy_timeout_ms, else kUnavailable and
  // nothing changed) until every connection in use has come back, closes
  // them all, calls `set_aside` (which moves the old files away), creates
  // the schema anew and registers the signatures this object has handed out
  // under the same ids, so the callers' ids stay valid. A connection opened
  // while the files move would find a new empty file beside the old WAL
  // (a reconcile that then failed with "disk I/O error" lost every row):
  // so none is. A thread that holds a connection and asks for another one
  // gets it at once (a caller's callback inside a walk of the rows), so the
  // wait cannot deadlock on it. REQUIRES: the caller holds the folder lock
  // exclusively (no other process uses the file) and no connection.
  Status Rebuild(const std::function<Status()>& set_aside);
  // Closes every pooled connection (those in use are closed when
  // returned): the next calls open the file now at the path, e.g. one
  // another process has rebuilt.
  void DropConnections();

 private:
  // Rebuild() once no connection is in use.
  Status RebuildUnused(const std::function<Status()>& set_aside,
                       const std::unordered_map<std::string, int64_t>& sigs);
  class Lease;
  DiskIndex(std::string path, IndexOptions options) : path_(std::move(path)), options_(options) {
    IndexForkGuard::Register(this);
  }
  // IndexForkGuard's fork handlers: mu_ is held across fork(); in the child
  // the pooled connections (the parent's, none in use then) are closed, the
  // leases of the parent's other threads forgotten.
  friend class IndexForkGuard;
  void HoldAcrossFork() NO_THREAD_SAFETY_ANALYSIS;
  void ReleaseAfterFork(bool in_child) NO_THREAD_SAFETY_ANALYSIS;
  Result<std::unique_ptr<SqliteDb>> OpenConnection();
  // Open() with IndexOptions::read_only.
  static Result<std::unique_ptr<DiskIndex>> OpenReadOnly(std::unique_ptr<DiskIndex> index);
  // A pooled (or new) connection; waits while a Rebuild() runs unless this
  // thread holds a connection of this index already.
  Result<Lease> Acquire();
  // A leased connection back (Lease's destructor), then Release().
  void Return(std::unique_ptr<SqliteDb> db, uint64_t generation);
  void Release(std::unique_ptr<SqliteDb> db, uint64_t generation);
  // WAL mode, the schema (created if new) and its version on `db`.
  static Status PrepareSchema(SqliteDb* db, const std::string& path);
  Result<std::string> RunCheck(std::string_view pragma);
  // Keyset paging: `first` (binding ?1 = limit) reads the first page, then
  // `next` the page after the last row, bound by `bind_after` (which binds
  // the limit too); `batch` rows per read snapshot.
  Status ForEachPage(std::string_view first, std::string_view next,
                     const std::function<void(SqliteStatement*, const IndexRow&)>& bind_after,
                     const std::function<void(const IndexRow&)>& fn, uint32_t batch);

  const std::string path_;
  const IndexOptions options_;
  bool immutable_ = false;  // read_only in a folder that cannot be written; set in Open
  Mutex mu_;
  // Bumped by Rebuild() and DropConnections(): a connection of an earlier
  // generation is closed when returned.
  uint64_t generation_ GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<SqliteDb>> free_ GUARDED_BY(mu_);
  // Connections out on lease; Rebuild() waits for none and meanwhile sets
  // rebuilding_, which holds back new leases (leases_cv_ both ways).
  uint64_t leased_ GUARDED_BY(mu_) = 0;
  bool rebuilding_ GUARDED_BY(mu_) = false;
  CondVar leases_cv_;
  std::unordered_map<std::string, int64_t> sig_ids_ GUARDED_BY(mu_);
};

// True if `a` and `b` describe the same file (key, signature, size,
// creation time, header hash; access times may differ).
bool SameFile(const IndexRow& a, const IndexRow& b);

// A pooled connection, returned to the pool when destroyed.
class DiskIndex::Lease {
 public:
  Lease(DiskIndex* owner, std::unique_ptr<SqliteDb> db, uint64_t generation,
        IndexForkGuard::Pass pass)
      : owner_(owner), db_(std::move(db)), generation_(generation), pass_(std::move(pass)) {}
  Lease(Lease&&) = default;
  Lease& operator=(Lease&&) = default;
  ~Lease() {
    if (db_ != nullptr) owner_->Return(std::move(db_), generation_);
  }
  SqliteDb* operator->() const { return db_.get(); }
  SqliteDb* get() const { return db_.get(); }

 private:
  DiskIndex* owner_;
  std::unique_ptr<SqliteDb> db_;
  uint64_t generation_;
  IndexForkGuard::Pass pass_;  // ends after the connection is back (or closed)
};

// The queries and deletes of one write transaction on one pooled
// connection (DiskIndex::BeginWrite). Rolled back unless Commit() succeeds;
// the connection goes back to the pool when this is destroyed.
//
// Thread safety: none; one thread uses a transaction.
class DiskIndex::WriteTransaction {
 public:
  WriteTransaction(WriteTransaction&&) = default;
  WriteTransaction& operator=(WriteTransaction&&) = default;

  Result<IndexTotals> Totals(uint64_t alloc_unit = 1);
  // Rows created before `before_us`, oldest first, at most `limit`.
  Result<std::vector<IndexRow>> RowsCreatedBefore(int64_t before_us, uint32_t limit);
  // Rows in LRU order (oldest access first, then key), at most `limit`,
  // after the first `skip` of them.
  Result<std::vector<IndexRow>> LruRows(uint32_t limit, uint64_t skip);
  // Deletes the row of `key`; true if there was one.
  Result<bool> Delete(const BlockKey& key);
  Status Commit();

 private:
  friend class DiskIndex;
  explicit WriteTransaction(Lease lease) : db_(std::move(lease)) {}

  Lease db_;  // its release rolls back a transaction still open
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_DISK_INDEX_H_
