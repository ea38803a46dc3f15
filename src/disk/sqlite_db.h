// Thin RAII wrappers over one SQLite connection and its prepared statements.
//
// SqliteDb owns a sqlite3* opened in multi-thread mode (no SQLite-internal
// mutex): one thread uses a connection at a time (DiskIndex hands them out
// from a pool). Every SQLite error becomes a Status: BUSY/LOCKED →
// kUnavailable, CORRUPT/NOTADB → kCorruption, FULL → kResourceExhausted,
// IOERR/CANTOPEN → kIOError, anything else → kInternal; the message names the
// SQL and SQLite's own text, and for an I/O error the file and system call
// that failed as SQLite's VFS reported them (e.g. "open(/d/index.sqlite-wal)
// - Permission denied"). A connection remembers the first CORRUPT/NOTADB
// error it returned (corruption()), so its owner can tell a damaged file
// from a failed call.
//
// Thread safety: none; one thread at a time per object.
#ifndef KVTIER_DISK_SQLITE_DB_H_
#define KVTIER_DISK_SQLITE_DB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvtier/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kvtier::disk {

// A Status for SQLite result code `rc` on `db` while doing `what`.
Status SqliteStatus(sqlite3* db, int rc, std::string_view what);

// `path` percent-encoded for the path part of a SQLite `file:` URI.
std::string UriPath(std::string_view path);

class SqliteDb;

class SqliteStatement {
 public:
  SqliteStatement(sqlite3_stmt* stmt, SqliteDb* owner) : stmt_(stmt), owner_(owner) {}
  ~SqliteStatement();
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  // Parameters are 1-based as in SQLite. Blobs and text are copied.
  void BindInt64(int i, int64_t v);
  void BindBlob(int i, std::span<const uint8_t> v);
  void BindText(int i, std::string_view v);

  // Runs one step: true if a row is available, false when done.
  Result<bool> Step();
  // Runs to completion, ignoring rows.
  Status Run();
  // Resets for re-use and clears the bindings.
  void Reset();

  int64_t ColumnInt64(int i) const;
  std::span<const uint8_t> ColumnBlob(int i) const;
  std::string ColumnText(int i) const;

 private:
  sqlite3_stmt* stmt_;
  SqliteDb* owner_;
};

// Resets a statement when the scope ends, so an early return leaves it
// re-usable and releases its read snapshot.
class StatementScope {
 public:
  explicit StatementScope(SqliteStatement* s) : s_(s) {}
  ~StatementScope() { s_->Reset(); }
  SqliteStatement* operator->() const { return s_; }
  StatementScope(const StatementScope&) = delete;
  StatementScope& operator=(const StatementScope&) = delete;

 private:
  SqliteStatement* s_;
};

class SqliteDb {
 public:
  enum class OpenMode {
    kReadWriteCreate,
    kReadWrite,
    // SQLITE_OPEN_READONLY: every write fails; the connection never
    // checkpoints the WAL nor creates anything but the -shm/-wal files
    // SQLite needs to read a WAL database (which it cannot where the folder
    // is not writable: then use kReadOnlyImmutable).
    kReadOnly,
    // kReadOnly plus the `immutable` URI parameter: no locks and no -shm,
    // so a database in a folder this process cannot write (a read-only
    // mount, another user's folder) opens; SQLite then assumes nobody
    // changes the file while it is open, and the WAL is not read.
    kReadOnlyImmutable,
  };

  // Opens `path` and sets the busy timeout.
  static Result<std::unique_ptr<SqliteDb>> Open(const std::string& path, OpenMode mode,
                                                uint32_t busy_timeout_ms);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  // Runs one or more statements with no parameters.
  Status Exec(std::string_view sql);
  // A prepared statement cached by its SQL text for the connection's life.
  Result<SqliteStatement*> Prepare(std::string_view sql);
  // Runs a single-value query like "PRAGMA user_version".
  Result<int64_t> QueryInt(std::string_view sql);

  // BEGIN IMMEDIATE (takes the write lock up front, so a transaction never
  // has to upgrade a read lock and hit SQLITE_BUSY without waiting).
  Status BeginImmediate();
  Status Commit();
  // Rolls back if a transaction is open; errors are ignored.
  void Rollback();

  int64_t Changes() const;
  sqlite3* raw() const { return db_; }

  // Makes the close leave the -wal and -shm files where they are
  // (SQLITE_FCNTL_PERSIST_WAL): SQLite removes them by path, and for a
  // connection whose database file has been moved away (DiskIndex::
  // Rebuild) that path names the new database's files.
  void KeepWalOnClose();

  // The first Corruption status this connection returned; OK if none.
  const Status& corruption() const { return corruption_; }
  // SqliteStatus(raw(), rc, what), remembered if it is a Corruption.
  Status Failure(int rc, std::string_view what);

 private:
  explicit SqliteDb(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  Status corruption_;
  std::map<std::string, std::unique_ptr<SqliteStatement>, std::less<>> statements_;
};

// Rolls back unless Commit() was called.
class Transaction {
 public:
  explicit Transaction(SqliteDb* db) : db_(db) {}
  ~Transaction() {
    if (open_) db_->Rollback();
  }
  Status Begin() {
    KVTIER_RETURN_IF_ERROR(db_->BeginImmediate());
    open_ = true;
    return Status::Ok();
  }
  Status Commit() {
    Status s = db_->Commit();
    if (s.ok()) open_ = false;
    return s;
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

 private:
  SqliteDb* db_;
  bool open_ = false;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_SQLITE_DB_H_
