#include "disk/sqlite_db.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvtier::disk {

namespace {

// What SQLite's VFS last reported on this thread about a failed file
// operation ("os_unix.c:1234: (13) open(/d/index.sqlite-wal) - Permission
// denied"): the file and the system call, which sqlite3_errmsg() leaves out
// ("disk I/O error"). A connection is used by one thread at a time and the
// VFS reports on the failing call's thread, so SqliteStatus(), on the same
// thread, takes it. Plain data (a fixed buffer, cut at its size): a
// thread_local with a destructor runs it at every thread's exit, in the
// Python module too, where ThreadSanitizer saw such a destructor race with
// glibc freeing the module's TLS (the DiskIndex lease list, fc455f3).
constexpr size_t kVfsReportMax = 1024;
thread_local char vfs_report[kVfsReportMax];
thread_local size_t vfs_report_len = 0;

void OnSqliteLog(void*, int code, const char* message) {
  const int primary = code & 0xff;
  // Only the VFS's own reports ("os_unix.c:..."): the statement-level line
  // SQLite logs after them repeats what sqlite3_errmsg() says.
  if ((primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY ||
       primary == SQLITE_FULL || primary == SQLITE_PERM) &&
      message != nullptr && std::string_view(message).starts_with("os_")) {
    vfs_report_len = std::min(std::strlen(message), kVfsReportMax);
    std::memcpy(vfs_report, message, vfs_report_len);
  }
}

// The VFS's report on the failure just seen ("os_unix.c:N: (errno)
// call(path) - text") as "call(path) - text", the text from the errno where
// SQLite left it empty.
std::string TakeVfsReport() {
  std::string r(vfs_report, vfs_report_len);
  vfs_report_len = 0;
  const size_t open = r.find(": (");
  const size_t close = open == std::string::npos ? open : r.find(") ", open);
  if (close == std::string::npos) return r;
  const int err = std::atoi(r.c_str() + open + 3);
  r = r.substr(close + 2);
  if (r.ends_with(" - ") && err > 0) r += std::strerror(err);
  return r;
}

}  // namespace

Status SqliteStatus(sqlite3* db, int rc, std::string_view what) {
  std::string msg = "index: " + std::string(what) + ": ";
  msg += (db != nullptr) ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const int primary = rc & 0xff;
  if (std::string vfs = TakeVfsReport();
      !vfs.empty() && (primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN ||
                       primary == SQLITE_READONLY || primary == SQLITE_FULL)) {
    msg += " (" + vfs + ")";
  }
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Unavailable(msg + " (the index is locked by another connection)");
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return Status::Corruption(msg);
    case SQLITE_FULL:
      return Status::ResourceExhausted(msg);
    case SQLITE_READONLY:
    case SQLITE_PERM:
      if (db != nullptr) {
        // SQLite does not say which file: the database or its WAL (-wal,
        // -shm) may be the one that cannot be written.
        const char* file = sqlite3_db_filename(db, "main");
        msg += std::string(" (") + (file != nullptr ? file : "the index") +
               " or its -wal or -shm file cannot be written: permissions, an immutable file or "
               "a read-only mount)";
      }
      return Status(StatusCode::kIOError, msg, db != nullptr ? sqlite3_system_errno(db) : 0);
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
      return Status(StatusCode::kIOError, msg, db != nullptr ? sqlite3_system_errno(db) : 0);
    default:
      return Status::Internal(msg);
  }
}

std::string UriPath(std::string_view path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    // RFC 3986 unreserved characters and '/' pass; everything else (notably
    // '?', '#', '%', spaces) is percent-encoded.
    if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || c == '/' ||
        c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

SqliteStatement::~SqliteStatement() { sqlite3_finalize(stmt_); }

void SqliteStatement::BindInt64(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }

void SqliteStatement::BindBlob(int i, std::span<const uint8_t> v) {
  sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

void SqliteStatement::BindText(int i, std::string_view v) {
  sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

Result<bool> SqliteStatement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return owner_->Failure(rc, sqlite3_sql(stmt_));
}

Status SqliteStatement::Run() {
  while (true) {
    KVTIER_ASSIGN_OR_RETURN(bool row, Step());
    if (!row) return Status::Ok();
  }
}

void SqliteStatement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t SqliteStatement::ColumnInt64(int i) const { return sqlite3_column_int64(stmt_, i); }

std::span<const uint8_t> SqliteStatement::ColumnBlob(int i) const {
  const void* p = sqlite3_column_blob(stmt_, i);
  int n = sqlite3_column_bytes(stmt_, i);
  if (p == nullptr || n <= 0) return {};
  return {static_cast<const uint8_t*>(p), static_cast<size_t>(n)};
}

std::string SqliteStatement::ColumnText(int i) const {
  const unsigned char* p = sqlite3_column_text(stmt_, i);
  int n = sqlite3_column_bytes(stmt_, i);
  if (p == nullptr || n <= 0) return {};
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
}

namespace {

// SQLite's memory statistics count every allocation under one process-wide
// mutex, which the disk tier's reader threads (one connection each) then
// queue on for every lookup. kvtier never reads them (sqlite3_memory_used).
// Only possible before SQLite initializes; if the application initialized it
// first, its setting stands (SQLITE_MISUSE, ignored).
void ConfigureSqliteOnce() {
  static const int rc = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) |
                        sqlite3_config(SQLITE_CONFIG_LOG, OnSqliteLog, nullptr);
  (void)rc;
}

}  // namespace

Result<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path, OpenMode mode,
                                                 uint32_t busy_timeout_ms) {
  ConfigureSqliteOnce();
  int flags = SQLITE_OPEN_NOMUTEX;
  switch (mode) {
    case OpenMode::kReadWriteCreate:
      flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
      break;
    case OpenMode::kReadWrite:
      flags |= SQLITE_OPEN_READWRITE;
      break;
    case OpenMode::kReadOnly:
      flags |= SQLITE_OPEN_READONLY;
      break;
    case OpenMode::kReadOnlyImmutable:
      flags |= SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
      break;
  }
  const std::string name =
      mode == OpenMode::kReadOnlyImmutable ? "file:" + UriPath(path) + "?immutable=1" : path;
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    Status s = SqliteStatus(db, rc, "open " + path);
    sqlite3_close_v2(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, static_cast<int>(busy_timeout_ms));
  return std::unique_ptr<SqliteDb>(new SqliteDb(db));
}

SqliteDb::~SqliteDb() {
  statements_.clear();  // finalize before closing
  sqlite3_close_v2(db_);
}

Status SqliteDb::Exec(std::string_view sql) {
  std::string text(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) return Failure(rc, text);
  return Status::Ok();
}

Status SqliteDb::Failure(int rc, std::string_view what) {
  Status s = SqliteStatus(db_, rc, what);
  if (s.IsCorruption() && corruption_.ok()) corruption_ = s;
  return s;
}

Result<SqliteStatement*> SqliteDb::Prepare(std::string_view sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end()) return it->second.get();
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return Failure(rc, "prepare " + std::string(sql));
  }
  auto owned = std::make_unique<SqliteStatement>(stmt, this);
  SqliteStatement* raw = owned.get();
  statements_.emplace(std::string(sql), std::move(owned));
  return raw;
}

Result<int64_t> SqliteDb::QueryInt(std::string_view sql) {
  KVTIER_ASSIGN_OR_RETURN(SqliteStatement * stmt, Prepare(sql));
  StatementScope scope(stmt);
  KVTIER_ASSIGN_OR_RETURN(bool row, stmt->Step());
  if (!row) return Status::Internal("index: no value from " + std::string(sql));
  return stmt->ColumnInt64(0);
}

Status SqliteDb::BeginImmediate() { return Exec("BEGIN IMMEDIATE"); }

Status SqliteDb::Commit() {
  Status s = Exec("COMMIT");
  if (!s.ok()) Rollback();
  return s;
}

void SqliteDb::Rollback() {
  if (sqlite3_get_autocommit(db_) == 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

int64_t SqliteDb::Changes() const { return sqlite3_changes64(db_); }

void SqliteDb::KeepWalOnClose() {
  int persist = 1;
  (void)sqlite3_file_control(db_, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
}

}  // namespace kvtier::disk
