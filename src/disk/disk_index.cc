#include "disk/disk_index.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace kvtier::disk {
namespace {

constexpr std::string_view kSchema = R"sql(
CREATE TABLE IF NOT EXISTS signatures(
  id INTEGER PRIMARY KEY,
  signature TEXT NOT NULL UNIQUE,
  blocks INTEGER NOT NULL DEFAULT 0,
  bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS blocks(
  key BLOB PRIMARY KEY CHECK(length(key) = 32),
  sig INTEGER NOT NULL,
  size INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  last_access INTEGER NOT NULL,
  header_hash INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS blocks_by_access ON blocks(last_access);
CREATE INDEX IF NOT EXISTS blocks_by_created ON blocks(created_at);
CREATE TRIGGER IF NOT EXISTS blocks_ai AFTER INSERT ON blocks BEGIN
  UPDATE signatures SET blocks = blocks + 1, bytes = bytes + NEW.size WHERE id = NEW.sig;
END;
CREATE TRIGGER IF NOT EXISTS blocks_ad AFTER DELETE ON blocks BEGIN
  UPDATE signatures SET blocks = blocks - 1, bytes = bytes - OLD.size WHERE id = OLD.sig;
END;
CREATE TRIGGER IF NOT EXISTS blocks_au AFTER UPDATE OF sig, size ON blocks BEGIN
  UPDATE signatures SET blocks = blocks - 1, bytes = bytes - OLD.size WHERE id = OLD.sig;
  UPDATE signatures SET blocks = blocks + 1, bytes = bytes + NEW.size WHERE id = NEW.sig;
END;
PRAGMA user_version = 1;
)sql";

constexpr std::string_view kLookup =
    "SELECT sig, size, created_at, last_access, header_hash FROM blocks WHERE key = ?1";
constexpr std::string_view kUpsert =
    "INSERT INTO blocks(key, sig, size, created_at, last_access, header_hash) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?6) "
    "ON CONFLICT(key) DO UPDATE SET sig = excluded.sig, size = excluded.size, "
    "created_at = excluded.created_at, last_access = max(last_access, excluded.last_access), "
    "header_hash = excluded.header_hash";
constexpr std::string_view kTouch =
    "UPDATE blocks SET last_access = max(last_access, ?2) WHERE key = ?1";
// The newest access time in the index: the floor of the next fresh stamp
// (AccessClock).
constexpr std::string_view kNewestAccess = "SELECT coalesce(max(last_access), 0) FROM blocks";
constexpr std::string_view kDelete = "DELETE FROM blocks WHERE key = ?1";
constexpr std::string_view kTouchIfSame =
    "UPDATE blocks SET last_access = max(last_access, ?6) WHERE key = ?1 AND sig = ?2 AND "
    "size = ?3 AND created_at = ?4 AND header_hash = ?5";
constexpr std::string_view kDeleteIfSame =
    "DELETE FROM blocks WHERE key = ?1 AND sig = ?2 AND size = ?3 AND created_at = ?4 AND "
    "header_hash = ?5";
constexpr std::string_view kReplaceIfSame =
    "UPDATE blocks SET sig = ?6, size = ?7, created_at = ?8, header_hash = ?9 WHERE key = ?1 AND "
    "sig = ?2 AND size = ?3 AND created_at = ?4 AND header_hash = ?5";
constexpr std::string_view kSelectColumns =
    "SELECT key, sig, size, created_at, last_access, header_hash FROM blocks WHERE key IN (";
// LookupMany pads each chunk to one of these sizes, so a connection keeps
// at most this many prepared statements for it.
constexpr size_t kLookupChunks[] = {1, 8, 32, 256};
constexpr std::string_view kTotals = "SELECT blocks, bytes FROM signatures WHERE blocks > 0";
constexpr std::string_view kPerSignature =
    "SELECT id, signature, blocks, bytes FROM signatures WHERE blocks > 0 ORDER BY signature";
constexpr std::string_view kSigSelect = "SELECT id FROM signatures WHERE signature = ?1";
constexpr std::string_view kSigInsert =
    "INSERT INTO signatures(signature) VALUES(?1) ON CONFLICT(signature) DO NOTHING";
constexpr std::string_view kSigText = "SELECT signature FROM signatures WHERE id = ?1";
constexpr std::string_view kRange =
    "SELECT key, sig, size, created_at, last_access, header_hash FROM blocks WHERE key >= ?1 AND "
    "key <= ?2";
constexpr std::string_view kAfter =
    "SELECT key, sig, size, created_at, last_access, header_hash FROM blocks WHERE key > ?1 "
    "ORDER BY key LIMIT ?2";
constexpr std::string_view kLruFirst =
    "SELECT key, sig, size, created_at, last_access, header_hash FROM blocks "
    "ORDER BY last_access, key LIMIT ?1";
constexpr std::string_view kLruAfter =
    "SELECT key, sig, size, created_at, last_access, header_hash FROM blocks "
    "WHERE (last_access, key) > (?1, ?2) ORDER BY last_access, key LIMIT ?3";
constexpr std::string_view kLru =
    "SELECT key, sig, size, created_at, last_access, header_hash FROM blocks "
    "ORDER BY last_access, key LIMIT ?1 OFFSET ?2";
constexpr std::string_view kExpired =
    "SELECT key, sig, size, created_at, last_access, header_hash FROM blocks WHERE created_at < ?1 "
    "ORDER BY created_at, key LIMIT ?2 OFFSET ?3";

std::span<const uint8_t> KeyBlob(const BlockKey& key) { return {key.bytes.data(), 32}; }

// Access times of a write transaction that records fresh accesses (a
// write, a read, a writer finding its block on disk): each one later than
// every access time already in the index and than the one before it, and
// never earlier than the wall clock's reading. Eviction orders by these
// times, so a block touched now is the newest whatever the wall clock did:
// blocks stamped while the clock ran ahead do not outlive the ones written
// after it stepped back (issue 33). Read under the write lock (BEGIN
// IMMEDIATE), so the sequence is one for every process sharing the folder.
class AccessClock {
 public:
  static Result<AccessClock> Read(SqliteDb* db) {
    KVTIER_ASSIGN_OR_RETURN(int64_t newest, db->QueryInt(kNewestAccess));
    return AccessClock(newest);
  }
  int64_t Next(int64_t wall_us) {
    const int64_t after = last_ == INT64_MAX ? INT64_MAX : last_ + 1;
    last_ = std::max(wall_us, after);
    return last_;
  }

 private:
  explicit AccessClock(int64_t newest) : last_(newest) {}
  int64_t last_;
};

IndexRow ReadRow(const SqliteStatement& s) {
  IndexRow row;
  std::span<const uint8_t> k = s.ColumnBlob(0);
  if (k.size() == row.key.bytes.size()) std::memcpy(row.key.bytes.data(), k.data(), k.size());
  row.sig_id = s.ColumnInt64(1);
  row.size = static_cast<uint64_t>(std::max<int64_t>(0, s.ColumnInt64(2)));
  row.created_at_us = s.ColumnInt64(3);
  row.last_access_us = s.ColumnInt64(4);
  row.header_hash = static_cast<uint64_t>(s.ColumnInt64(5));
  return row;
}

Result<std::vector<IndexRow>> ReadRows(SqliteStatement* stmt) {
  StatementScope scope(stmt);
  std::vector<IndexRow> rows;
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(bool more, stmt->Step());
    if (!more) break;
    rows.push_back(ReadRow(*stmt));
  }
  return rows;
}

Result<IndexTotals> ReadTotals(SqliteDb* db, uint64_t alloc_unit) {
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kTotals));
  StatementScope scope(stmt);
  IndexTotals t;
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(bool row, stmt->Step());
    if (!row) break;
    const auto blocks = static_cast<uint64_t>(std::max<int64_t>(0, stmt->ColumnInt64(0)));
    const auto bytes = static_cast<uint64_t>(std::max<int64_t>(0, stmt->ColumnInt64(1)));
    t.entries += blocks;
    t.bytes += bytes;
    t.allocated += AllocatedEstimate(blocks, bytes, alloc_unit);
  }
  return t;
}

Status DeleteRow(SqliteDb* db, const BlockKey& key) {
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kDelete));
  StatementScope scope(stmt);
  stmt->BindBlob(1, KeyBlob(key));
  return stmt->Run();
}

// Asks for WAL mode; the journal mode now in force.
Result<std::string> JournalModeWal(SqliteDb* db) {
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * jm, db->Prepare("PRAGMA journal_mode=WAL"));
  StatementScope scope(jm);
  KVTIER_ASSIGN_OR_RETURN(bool row, jm->Step());
  return row ? jm->ColumnText(0) : std::string();
}

}  // namespace

uint64_t AllocatedEstimate(uint64_t blocks, uint64_t bytes, uint64_t unit) {
  if (blocks == 0) return 0;
  unit = std::max<uint64_t>(unit, 1);
  const uint64_t mean = bytes / blocks + (bytes % blocks != 0 ? 1 : 0);
  const uint64_t per_file = (mean / unit + (mean % unit != 0 ? 1 : 0)) * unit;
  return per_file > UINT64_MAX / blocks ? UINT64_MAX : per_file * blocks;
}

bool SameFile(const IndexRow& a, const IndexRow& b) {
  return a.key == b.key && a.sig_id == b.sig_id && a.size == b.size &&
         a.created_at_us == b.created_at_us && a.header_hash == b.header_hash;
}

Result<std::unique_ptr<SqliteDb>> DiskIndex::OpenConnection() {
  SqliteDb::OpenMode mode = SqliteDb::OpenMode::kReadWrite;
  if (options_.read_only) {
    mode = immutable_ ? SqliteDb::OpenMode::kReadOnlyImmutable : SqliteDb::OpenMode::kReadOnly;
  } else if (options_.create_if_missing) {
    mode = SqliteDb::OpenMode::kReadWriteCreate;
  }
  auto db = SqliteDb::Open(path_, mode, options_.busy_timeout_ms);
  if (!db.ok()) {
    if ((!options_.create_if_missing || options_.read_only) && db.status().IsIOError()) {
      return Status::NotFound("no index at " + path_);
    }
    return db.status();
  }
  if (!options_.read_only) {
    KVTIER_RETURN_IF_ERROR((*db)->Exec(options_.synchronous_full ? "PRAGMA synchronous=FULL"
                                                                 : "PRAGMA synchronous=NORMAL"));
    // The WAL is disk space no limit counts: by default it grows to 1000
    // pages (4 MiB) before a checkpoint, and stays that large. On a small
    // or nearly full disk that is what filled it (issue 25: two writers on a
    // 6 MiB tmpfs, a 4 MiB WAL). A checkpoint every 256 pages, and the file
    // cut back to 1 MiB after one, keep it small at the cost of a
    // checkpoint every megabyte of rows.
    KVTIER_RETURN_IF_ERROR((*db)->Exec("PRAGMA wal_autocheckpoint=256"));
    KVTIER_RETURN_IF_ERROR((*db)->Exec("PRAGMA journal_size_limit=1048576"));
  }
  return std::move(db).value();
}

Result<std::unique_ptr<DiskIndex>> DiskIndex::OpenReadOnly(std::unique_ptr<DiskIndex> index) {
  const std::string& path = index->path_;
  // A missing file fails the open (NotFound); a folder SQLite cannot write
  // fails the first read, when it cannot make the -shm file: then again,
  // immutable.
  Result<int64_t> version = Status::Internal("not read");
  for (bool immutable : {false, true}) {
    index->immutable_ = immutable;
    auto db = index->OpenConnection();
    if (!db.ok()) return db.status();
    version = (*db)->QueryInt("PRAGMA user_version");
    if (version.ok()) {
      index->Release(std::move(db).value(), 0);
      break;
    }
    if (!version.status().IsIOError() && !version.status().IsUnavailable()) break;
  }
  if (!version.ok()) return version.status();
  if (*version == 0) return Status::NotFound("no index at " + path + " (empty database)");
  if (*version != kIndexSchemaVersion) {
    return Status::FailedPrecondition("index: " + path + " has schema version " +
                                      std::to_string(*version) + "; this kvtier reads version " +
                                      std::to_string(kIndexSchemaVersion));
  }
  KVTIER_ASSIGN_OR_RETURN(Lease db, index->Acquire());
  KVTIER_RETURN_IF_ERROR(ReadTotals(db.get(), 1).status());
  return index;
}

Result<std::unique_ptr<DiskIndex>> DiskIndex::Open(const std::string& path,
                                                   const IndexOptions& options) {
  const IndexForkGuard::Pass pass = IndexForkGuard::Enter();
  std::unique_ptr<DiskIndex> index(new DiskIndex(path, options));
  if (options.read_only) return OpenReadOnly(std::move(index));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, index->OpenConnection());
  KVTIER_RETURN_IF_ERROR(PrepareSchema(db.get(), path));
  index->Release(std::move(db), 0);
  return index;
}

Status DiskIndex::PrepareSchema(SqliteDb* db, const std::string& path) {
  // The first statement reads the file header: NOTADB/CORRUPT show up here.
  // Processes opening a new index at once all read it in rollback mode and
  // each needs an exclusive lock to switch it to WAL: SQLite refuses all
  // but one at once (waiting would deadlock). A refused one waits for the
  // switcher's lock (BEGIN IMMEDIATE waits through the busy timeout) and
  // then finds WAL (a bounded few tries for openers that keep arriving
  // while the file is new).
  constexpr int kJournalModeTries = 16;
  std::string mode;
  for (int attempt = 1;; ++attempt) {
    Result<std::string> m = JournalModeWal(db);
    if (m.ok() || !m.status().IsUnavailable() || attempt == kJournalModeTries) {
      KVTIER_ASSIGN_OR_RETURN(mode, std::move(m));
      break;
    }
    // Refused at once (SQLite does not wait when a reader asks to upgrade
    // its lock): wait for the switching process's lock through the busy
    // timeout, holding none while waiting, so that the next try finds WAL
    // instead of spinning into the same refusal.
    (void)db->Exec("BEGIN IMMEDIATE; COMMIT;");
  }
  if (mode != "wal") {
    return Status::Internal("index: " + path + " cannot use WAL mode (journal_mode=" + mode + ")");
  }
  KVTIER_ASSIGN_OR_RETURN(int64_t version, db->QueryInt("PRAGMA user_version"));
  if (version == 0) {
    Transaction tx(db);
    KVTIER_RETURN_IF_ERROR(tx.Begin());
    KVTIER_ASSIGN_OR_RETURN(version, db->QueryInt("PRAGMA user_version"));
    if (version == 0) {
      KVTIER_RETURN_IF_ERROR(db->Exec(kSchema));
      version = kIndexSchemaVersion;
    }
    KVTIER_RETURN_IF_ERROR(tx.Commit());
  }
  if (version != kIndexSchemaVersion) {
    return Status::FailedPrecondition("index: " + path + " has schema version " +
                                      std::to_string(version) + "; this kvtier reads version " +
                                      std::to_string(kIndexSchemaVersion));
  }
  // A damaged file may still pass the header check; touch the tables.
  return ReadTotals(db, 1).status();
}

Status DiskIndex::Rebuild(const std::function<Status()>& set_aside) {
  std::unordered_map<std::string, int64_t> sigs;
  {
    MutexLock lock(&mu_);
    sigs = sig_ids_;
  }
  // No connection in use while the files move (see the header), waited for
  // in steps so that a lease that never comes back bounds the wait.
  {
    MutexLock lock(&mu_);
    while (rebuilding_) leases_cv_.Wait(&lock);
    rebuilding_ = true;
    uint64_t timeouts = 0;
    const uint64_t max_timeouts = std::max<uint64_t>(1, options_.busy_timeout_ms / 100);
    while (leased_ > 0 && timeouts < max_timeouts) {
      if (!leases_cv_.WaitFor(&lock, 100'000)) ++timeouts;
    }
    if (leased_ > 0) {
      rebuilding_ = false;
      leases_cv_.SignalAll();
      return Status::Unavailable("index: " + std::to_string(leased_) +
                                 " connection(s) still in use after " +
                                 std::to_string(options_.busy_timeout_ms) + " ms; not rebuilt");
    }
  }
  Status rebuilt = [&] {
    const IndexForkGuard::Pass pass = IndexForkGuard::Enter();
    return RebuildUnused(set_aside, sigs);
  }();
  MutexLock lock(&mu_);
  rebuilding_ = false;
  leases_cv_.SignalAll();
  return rebuilt;
}

Status DiskIndex::RebuildUnused(const std::function<Status()>& set_aside,
                                const std::unordered_map<std::string, int64_t>& sigs) {
  DropConnections();
  KVTIER_RETURN_IF_ERROR(set_aside());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, OpenConnection());
  KVTIER_RETURN_IF_ERROR(PrepareSchema(db.get(), path_));
  {
    Transaction tx(db.get());
    KVTIER_RETURN_IF_ERROR(tx.Begin());
    KVTIER_ASSIGN_OR_RETURN(
        SqliteStatement * ins,
        db->Prepare("INSERT INTO signatures(id, signature) VALUES(?1, ?2) ON CONFLICT DO NOTHING"));
    for (const auto& [signature, id] : sigs) {
      StatementScope scope(ins);
      ins->BindInt64(1, id);
      ins->BindText(2, signature);
      KVTIER_RETURN_IF_ERROR(ins->Run());
    }
    KVTIER_RETURN_IF_ERROR(tx.Commit());
  }
  // Connections opened while the files moved may have the old one open.
  DropConnections();
  uint64_t generation;
  {
    MutexLock lock(&mu_);
    generation = generation_;
  }
  Release(std::move(db), generation);
  return Status::Ok();
}

void DiskIndex::DropConnections() {
  const IndexForkGuard::Pass pass = IndexForkGuard::Enter();  // the closes below
  std::vector<std::unique_ptr<SqliteDb>> old;
  {
    MutexLock lock(&mu_);
    ++generation_;
    old.swap(free_);
  }
  for (auto& db : old) db->KeepWalOnClose();
}

DiskIndex::~DiskIndex() {
  IndexForkGuard::Unregister(this);
  const IndexForkGuard::Pass pass = IndexForkGuard::Enter();  // the pooled connections close
  std::vector<std::unique_ptr<SqliteDb>> pooled;
  {
    MutexLock lock(&mu_);
    pooled.swap(free_);
  }
}

namespace {

// The indexes whose connections this thread holds, once per lease. Plain
// data, no destructor: a thread_local std::vector here (the Python module
// is loaded with dlopen, so its thread_locals live in TLS that glibc
// allocates per thread) had its destructor run at thread exit on memory
// glibc then freed from the next thread that reused the cached stack,
// which ThreadSanitizer reported as a race (CI, test_vllm.py, tsan stage).
struct ThreadLeases {
  static constexpr size_t kMax = 32;
  const DiskIndex* held[kMax];
  size_t count;
  // Leases past kMax at once (no thread takes that many): their index is
  // not known, so this thread is taken to hold every index's.
  uint64_t unknown;
};
thread_local ThreadLeases t_leasing{};

bool ThisThreadLeases(const DiskIndex* index) {
  return t_leasing.unknown > 0 || std::find(t_leasing.held, t_leasing.held + t_leasing.count,
                                            index) != t_leasing.held + t_leasing.count;
}

uint64_t LeasesOfThisThread(const DiskIndex* index) {
  return static_cast<uint64_t>(std::count(t_leasing.held, t_leasing.held + t_leasing.count, index));
}

void NoteLease(const DiskIndex* index) {
  if (t_leasing.count < ThreadLeases::kMax) {
    t_leasing.held[t_leasing.count++] = index;
  } else {
    ++t_leasing.unknown;
  }
}

void ForgetOneLease(const DiskIndex* index) {
  const DiskIndex** end = t_leasing.held + t_leasing.count;
  const DiskIndex** it = std::find(t_leasing.held, end, index);
  if (it != end) {
    *it = *(end - 1);  // the order means nothing
    --t_leasing.count;
  } else if (t_leasing.unknown > 0) {
    --t_leasing.unknown;
  }  // else returned by another thread than the one that took it
}

}  // namespace

void DiskIndex::HoldAcrossFork() { mu_.Lock(); }

void DiskIndex::ReleaseAfterFork(bool in_child) {
  if (in_child) {
    // Closed here, in the child: the parent's connections stay open there.
    // A checkpoint on close needs the file to itself, which the parent's
    // locks deny; the WAL stays either way.
    ++generation_;
    for (std::unique_ptr<SqliteDb>& db : free_) db->KeepWalOnClose();
    free_.clear();
    leased_ = LeasesOfThisThread(this);
    rebuilding_ = false;
    new (&leases_cv_) CondVar();  // its waiters were the parent's threads
  }
  mu_.Unlock();
}

Result<DiskIndex::Lease> DiskIndex::Acquire() {
  IndexForkGuard::Pass pass = IndexForkGuard::Enter();  // before mu_, which a fork holds
  uint64_t generation;
  {
    MutexLock lock(&mu_);
    if (!ThisThreadLeases(this)) {
      while (rebuilding_) leases_cv_.Wait(&lock);
    }
    ++leased_;
    NoteLease(this);
    generation = generation_;
    if (!free_.empty()) {
      std::unique_ptr<SqliteDb> db = std::move(free_.back());
      free_.pop_back();
      return Lease(this, std::move(db), generation, std::move(pass));
    }
  }
  Result<std::unique_ptr<SqliteDb>> db = OpenConnection();
  if (!db.ok()) {
    MutexLock lock(&mu_);
    --leased_;
    ForgetOneLease(this);
    leases_cv_.SignalAll();
    return db.status();
  }
  return Lease(this, std::move(db).value(), generation, std::move(pass));
}

void DiskIndex::Return(std::unique_ptr<SqliteDb> db, uint64_t generation) {
  db->Rollback();  // never pool a connection with an open transaction, nor wait on one
  {
    MutexLock lock(&mu_);
    --leased_;
    ForgetOneLease(this);
    leases_cv_.SignalAll();
  }
  Release(std::move(db), generation);
}

void DiskIndex::Release(std::unique_ptr<SqliteDb> db, uint64_t generation) {
  db->Rollback();  // never return a connection with an open transaction
  bool current;
  {
    MutexLock lock(&mu_);
    current = generation == generation_;
    if (current && db->corruption().ok()) {
      free_.push_back(std::move(db));
      return;
    }
  }
  // Not reused: the file it has open was replaced, or its cache may hold
  // damaged pages.
  if (!current) db->KeepWalOnClose();
  const Status found = db->corruption();
  db.reset();
  // Damage in a file that has been replaced since is no news.
  if (!found.ok() && current && options_.on_corruption) options_.on_corruption(found);
}

Result<int64_t> DiskIndex::SignatureId(std::string_view signature) {
  {
    MutexLock lock(&mu_);
    auto it = sig_ids_.find(std::string(signature));
    if (it != sig_ids_.end()) return it->second;
  }
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  int64_t id = 0;
  for (int attempt = 0; attempt < 2 && id == 0; ++attempt) {
    KVTIER_ASSIGN_OR_RETURN(SqliteStatement * sel, db->Prepare(kSigSelect));
    {
      StatementScope scope(sel);
      sel->BindText(1, signature);
      KVTIER_ASSIGN_OR_RETURN(bool row, sel->Step());
      if (row) id = sel->ColumnInt64(0);
    }
    if (id == 0 && attempt == 0) {
      if (options_.read_only) {
        return Status::NotFound("index: no block of signature " + std::string(signature));
      }
      KVTIER_ASSIGN_OR_RETURN(SqliteStatement * ins, db->Prepare(kSigInsert));
      StatementScope scope(ins);
      ins->BindText(1, signature);
      KVTIER_RETURN_IF_ERROR(ins->Run());
    }
  }
  if (id == 0) return Status::Internal("index: cannot register a layout signature");
  MutexLock lock(&mu_);
  sig_ids_.emplace(std::string(signature), id);
  return id;
}

Result<std::string> DiskIndex::SignatureText(int64_t sig_id) {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kSigText));
  StatementScope scope(stmt);
  stmt->BindInt64(1, sig_id);
  KVTIER_ASSIGN_OR_RETURN(bool row, stmt->Step());
  return row ? stmt->ColumnText(0) : std::string();
}

Result<std::vector<SignatureTotals>> DiskIndex::PerSignature() {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kPerSignature));
  StatementScope scope(stmt);
  std::vector<SignatureTotals> out;
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(bool row, stmt->Step());
    if (!row) break;
    SignatureTotals t;
    t.sig_id = stmt->ColumnInt64(0);
    t.signature = stmt->ColumnText(1);
    t.blocks = static_cast<uint64_t>(std::max<int64_t>(0, stmt->ColumnInt64(2)));
    t.bytes = static_cast<uint64_t>(std::max<int64_t>(0, stmt->ColumnInt64(3)));
    out.push_back(std::move(t));
  }
  return out;
}

Result<IndexTotals> DiskIndex::Totals(uint64_t alloc_unit) {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  return ReadTotals(db.get(), alloc_unit);
}

Result<std::optional<IndexRow>> DiskIndex::Lookup(const BlockKey& key) {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kLookup));
  StatementScope scope(stmt);
  stmt->BindBlob(1, KeyBlob(key));
  KVTIER_ASSIGN_OR_RETURN(bool row, stmt->Step());
  if (!row) return std::optional<IndexRow>();
  IndexRow r;
  r.key = key;
  r.sig_id = stmt->ColumnInt64(0);
  r.size = static_cast<uint64_t>(std::max<int64_t>(0, stmt->ColumnInt64(1)));
  r.created_at_us = stmt->ColumnInt64(2);
  r.last_access_us = stmt->ColumnInt64(3);
  r.header_hash = static_cast<uint64_t>(stmt->ColumnInt64(4));
  return std::optional<IndexRow>(r);
}

Result<std::vector<std::optional<IndexRow>>> DiskIndex::LookupMany(std::span<const BlockKey> keys) {
  std::vector<std::optional<IndexRow>> out(keys.size());
  if (keys.empty()) return out;
  std::unordered_map<BlockKey, IndexRow, BlockKeyHash> found;
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  for (size_t begin = 0; begin < keys.size();) {
    const size_t left = keys.size() - begin;
    size_t chunk = kLookupChunks[std::size(kLookupChunks) - 1];
    for (size_t c : kLookupChunks) {
      if (c >= left) {
        chunk = c;
        break;
      }
    }
    std::string sql(kSelectColumns);
    for (size_t i = 0; i < chunk; ++i) {
      sql += i == 0 ? "?" : ",?";
    }
    sql += ")";
    KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(sql));
    const size_t real = std::min(chunk, left);
    // Unused slots repeat the last key: IN ignores duplicates.
    for (size_t i = 0; i < chunk; ++i) {
      stmt->BindBlob(static_cast<int>(i + 1), KeyBlob(keys[begin + std::min(i, real - 1)]));
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<IndexRow> rows, ReadRows(stmt));
    for (IndexRow& r : rows) found.insert_or_assign(r.key, r);
    begin += real;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = found.find(keys[i]);
    if (it != found.end()) out[i] = it->second;
  }
  return out;
}

Status DiskIndex::Upsert(std::span<const IndexRow> rows, AccessTimes times) {
  return UpsertIf(rows, FileCheck(), times).status();
}

Result<std::vector<bool>> DiskIndex::UpsertIf(std::span<const IndexRow> rows,
                                              const FileCheck& describes_file, AccessTimes times) {
  std::vector<bool> written(rows.size(), false);
  if (rows.empty()) return written;
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  Transaction tx(db.get());
  KVTIER_RETURN_IF_ERROR(tx.Begin());
  std::optional<AccessClock> clock;
  if (times == AccessTimes::kFresh) {
    KVTIER_ASSIGN_OR_RETURN(clock, AccessClock::Read(db.get()));
  }
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kUpsert));
  for (size_t i = 0; i < rows.size(); ++i) {
    const IndexRow& r = rows[i];
    if (describes_file && !describes_file(r)) continue;
    StatementScope scope(stmt);
    stmt->BindBlob(1, KeyBlob(r.key));
    stmt->BindInt64(2, r.sig_id);
    stmt->BindInt64(3, static_cast<int64_t>(r.size));
    stmt->BindInt64(4, r.created_at_us);
    stmt->BindInt64(5, clock ? clock->Next(r.last_access_us) : r.last_access_us);
    stmt->BindInt64(6, static_cast<int64_t>(r.header_hash));
    KVTIER_RETURN_IF_ERROR(stmt->Run());
    written[i] = true;
  }
  KVTIER_RETURN_IF_ERROR(tx.Commit());
  return written;
}

Status DiskIndex::Touch(std::span<const std::pair<BlockKey, int64_t>> touches) {
  if (touches.empty()) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  Transaction tx(db.get());
  KVTIER_RETURN_IF_ERROR(tx.Begin());
  KVTIER_ASSIGN_OR_RETURN(AccessClock clock, AccessClock::Read(db.get()));
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kTouch));
  for (const auto& [key, at] : touches) {
    StatementScope scope(stmt);
    stmt->BindBlob(1, KeyBlob(key));
    stmt->BindInt64(2, clock.Next(at));
    KVTIER_RETURN_IF_ERROR(stmt->Run());
  }
  return tx.Commit();
}

Result<uint64_t> DiskIndex::Delete(std::span<const BlockKey> keys) {
  if (keys.empty()) return uint64_t{0};
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  Transaction tx(db.get());
  KVTIER_RETURN_IF_ERROR(tx.Begin());
  uint64_t removed = 0;
  for (const BlockKey& key : keys) {
    KVTIER_RETURN_IF_ERROR(DeleteRow(db.get(), key));
    removed += static_cast<uint64_t>(db->Changes());
  }
  KVTIER_RETURN_IF_ERROR(tx.Commit());
  return removed;
}

Result<bool> DiskIndex::TouchIfPresent(const IndexRow& row, int64_t at_us) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<bool> touched,
                          TouchIfPresentMany(std::span<const IndexRow>(&row, 1), at_us));
  return bool{touched[0]};
}

Result<std::vector<bool>> DiskIndex::TouchIfPresentMany(std::span<const IndexRow> rows,
                                                        int64_t at_us) {
  std::vector<bool> touched(rows.size(), false);
  if (rows.empty()) return touched;
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  Transaction tx(db.get());
  KVTIER_RETURN_IF_ERROR(tx.Begin());
  KVTIER_ASSIGN_OR_RETURN(AccessClock clock, AccessClock::Read(db.get()));
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kTouchIfSame));
  for (size_t i = 0; i < rows.size(); ++i) {
    const IndexRow& row = rows[i];
    StatementScope scope(stmt);
    stmt->BindBlob(1, KeyBlob(row.key));
    stmt->BindInt64(2, row.sig_id);
    stmt->BindInt64(3, static_cast<int64_t>(row.size));
    stmt->BindInt64(4, row.created_at_us);
    stmt->BindInt64(5, static_cast<int64_t>(row.header_hash));
    stmt->BindInt64(6, clock.Next(at_us));
    KVTIER_RETURN_IF_ERROR(stmt->Run());
    touched[i] = db->Changes() > 0;
  }
  KVTIER_RETURN_IF_ERROR(tx.Commit());
  return touched;
}

Result<bool> DiskIndex::DeleteIfSame(const IndexRow& row) {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  Transaction tx(db.get());
  KVTIER_RETURN_IF_ERROR(tx.Begin());
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kDeleteIfSame));
  bool deleted = false;
  {
    StatementScope scope(stmt);
    stmt->BindBlob(1, KeyBlob(row.key));
    stmt->BindInt64(2, row.sig_id);
    stmt->BindInt64(3, static_cast<int64_t>(row.size));
    stmt->BindInt64(4, row.created_at_us);
    stmt->BindInt64(5, static_cast<int64_t>(row.header_hash));
    KVTIER_RETURN_IF_ERROR(stmt->Run());
    deleted = db->Changes() > 0;
  }
  KVTIER_RETURN_IF_ERROR(tx.Commit());
  return deleted;
}

Result<bool> DiskIndex::ReplaceIfSame(const IndexRow& old_row, const IndexRow& new_row) {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  Transaction tx(db.get());
  KVTIER_RETURN_IF_ERROR(tx.Begin());
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kReplaceIfSame));
  bool replaced = false;
  {
    StatementScope scope(stmt);
    stmt->BindBlob(1, KeyBlob(old_row.key));
    stmt->BindInt64(2, old_row.sig_id);
    stmt->BindInt64(3, static_cast<int64_t>(old_row.size));
    stmt->BindInt64(4, old_row.created_at_us);
    stmt->BindInt64(5, static_cast<int64_t>(old_row.header_hash));
    stmt->BindInt64(6, new_row.sig_id);
    stmt->BindInt64(7, static_cast<int64_t>(new_row.size));
    stmt->BindInt64(8, new_row.created_at_us);
    stmt->BindInt64(9, static_cast<int64_t>(new_row.header_hash));
    KVTIER_RETURN_IF_ERROR(stmt->Run());
    replaced = db->Changes() > 0;
  }
  KVTIER_RETURN_IF_ERROR(tx.Commit());
  return replaced;
}

Result<uint64_t> DiskIndex::DeleteAll() {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  Transaction tx(db.get());
  KVTIER_RETURN_IF_ERROR(tx.Begin());
  KVTIER_RETURN_IF_ERROR(db->Exec("DELETE FROM blocks"));
  uint64_t removed = static_cast<uint64_t>(db->Changes());
  KVTIER_RETURN_IF_ERROR(tx.Commit());
  return removed;
}

Result<std::vector<IndexRow>> DiskIndex::RowsWithPrefix(uint8_t prefix) {
  BlockKey lo, hi;
  lo.bytes.fill(0);
  hi.bytes.fill(0xff);
  lo.bytes[0] = prefix;
  hi.bytes[0] = prefix;
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kRange));
  stmt->BindBlob(1, KeyBlob(lo));
  stmt->BindBlob(2, KeyBlob(hi));
  return ReadRows(stmt);
}

Status DiskIndex::ForEachPage(
    std::string_view first, std::string_view next,
    const std::function<void(SqliteStatement*, const IndexRow&)>& bind_after,
    const std::function<void(const IndexRow&)>& fn, uint32_t batch) {
  std::optional<IndexRow> after;
  while (true) {
    std::vector<IndexRow> rows;
    {
      KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
      KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(after ? next : first));
      if (after) {
        bind_after(stmt, *after);
      } else {
        stmt->BindInt64(1, batch);
      }
      KVTIER_ASSIGN_OR_RETURN(rows, ReadRows(stmt));
    }
    for (const IndexRow& r : rows) fn(r);
    if (rows.size() < batch) return Status::Ok();
    after = rows.back();
  }
}

Status DiskIndex::ForEachRow(const std::function<void(const IndexRow&)>& fn, uint32_t batch) {
  constexpr std::string_view kFirst =
      "SELECT key, sig, size, created_at, last_access, header_hash FROM blocks ORDER BY key LIMIT "
      "?1";
  return ForEachPage(
      kFirst, kAfter,
      [batch](SqliteStatement* stmt, const IndexRow& last) {
        stmt->BindBlob(1, KeyBlob(last.key));
        stmt->BindInt64(2, batch);
      },
      fn, batch);
}

Status DiskIndex::ForEachRowByAccess(const std::function<void(const IndexRow&)>& fn,
                                     uint32_t batch) {
  return ForEachPage(
      kLruFirst, kLruAfter,
      [batch](SqliteStatement* stmt, const IndexRow& last) {
        stmt->BindInt64(1, last.last_access_us);
        stmt->BindBlob(2, KeyBlob(last.key));
        stmt->BindInt64(3, batch);
      },
      fn, batch);
}

Result<std::vector<IndexRow>> DiskIndex::LruRows(uint32_t limit) {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(kLru));
  stmt->BindInt64(1, limit);
  stmt->BindInt64(2, 0);
  return ReadRows(stmt);
}

Result<DiskIndex::WriteTransaction> DiskIndex::BeginWrite() {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  KVTIER_RETURN_IF_ERROR(db->BeginImmediate());
  return WriteTransaction(std::move(db));
}

Result<IndexTotals> DiskIndex::WriteTransaction::Totals(uint64_t alloc_unit) {
  return ReadTotals(db_.get(), alloc_unit);
}

Result<std::vector<IndexRow>> DiskIndex::WriteTransaction::RowsCreatedBefore(int64_t before_us,
                                                                             uint32_t limit) {
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db_->Prepare(kExpired));
  stmt->BindInt64(1, before_us);
  stmt->BindInt64(2, limit);
  stmt->BindInt64(3, 0);
  return ReadRows(stmt);
}

Result<std::vector<IndexRow>> DiskIndex::WriteTransaction::LruRows(uint32_t limit, uint64_t skip) {
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db_->Prepare(kLru));
  stmt->BindInt64(1, limit);
  stmt->BindInt64(2, static_cast<int64_t>(skip));
  return ReadRows(stmt);
}

Result<bool> DiskIndex::WriteTransaction::Delete(const BlockKey& key) {
  KVTIER_RETURN_IF_ERROR(DeleteRow(db_.get(), key));
  return db_->Changes() > 0;
}

Status DiskIndex::WriteTransaction::Commit() { return db_->Commit(); }

Result<std::string> DiskIndex::IntegrityCheck() { return RunCheck("PRAGMA integrity_check"); }

Result<std::string> DiskIndex::QuickCheck() { return RunCheck("PRAGMA quick_check"); }

Result<std::string> DiskIndex::RunCheck(std::string_view pragma) {
  KVTIER_ASSIGN_OR_RETURN(Lease db, Acquire());
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, db->Prepare(pragma));
  StatementScope scope(stmt);
  std::string out;
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(bool row, stmt->Step());
    if (!row) break;
    if (!out.empty()) out += "; ";
    out += stmt->ColumnText(0);
  }
  return out;
}

}  // namespace kvtier::disk
