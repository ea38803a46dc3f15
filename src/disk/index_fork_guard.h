// IndexForkGuard: fork() in a process whose cache folders have their SQLite
// indexes open.
//
// SQLite keeps, per process, one record for each database file it has open,
// shared by all of the process's connections to it: the locks they hold, and
// the mutexes that guard them (the WAL's shared memory likewise). fork()
// copies those records as they are at that instant. A mutex a parent thread
// held stays held, and the child's first open of the same file waits on it
// for ever; a lock a parent connection held is believed held in the child,
// which never took it, and the child's BEGIN IMMEDIATE waits on that
// "sibling" until its busy timeout, every time. A forked child that opens
// the folder again (the Python module, the engine backends and the C API
// all do) must find neither.
//
// So every SQLite call of the disk layer runs under a Pass: a DiskIndex
// lease holds one, and so do the opens and closes made outside a lease.
// Before fork() the forking thread waits until no pass is out (new passes
// wait meanwhile, except on a thread that holds one already, whose wait
// could not end), at most kForkWaitMicros, and holds the guard across the
// fork. Then the parent goes on; in the child every registered index closes
// its pooled connections (the parent's copies, none in a call or a
// transaction), so the child's own connections start from records of their
// own and take real locks.
//
// Thread safety: all methods may be called from many threads at once. One
// mutex guards the count of passes out, the fork flag and the list of
// indexes.
#ifndef KVTIER_DISK_INDEX_FORK_GUARD_H_
#define KVTIER_DISK_INDEX_FORK_GUARD_H_

#include <cstdint>

namespace kvtier::disk {

class DiskIndex;

class IndexForkGuard {
 public:
  // How long fork() waits for the passes out to come back before it goes
  // ahead anyway (a pass held up behind a lock the forking thread holds).
  static constexpr uint64_t kForkWaitMicros = 5'000'000;

  // One thread's SQLite use; movable, ends when destroyed.
  class Pass {
   public:
    Pass(Pass&& other) noexcept : held_(other.held_) { other.held_ = false; }
    Pass& operator=(Pass&& other) noexcept;
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    ~Pass() { End(); }

   private:
    friend class IndexForkGuard;
    Pass() = default;
    void End();
    bool held_ = false;
  };

  // Waits while a fork() waits for the passes out, unless this thread holds
  // one already.
  static Pass Enter();

  // The indexes whose pooled connections a forked child closes.
  static void Register(DiskIndex* index);
  static void Unregister(DiskIndex* index);

  // Passes out now, and forks that went ahead with passes still out (each
  // child then inherits those connections as they were). For tests.
  static uint64_t PassesOut();
  static uint64_t ForksWithPassesOut();

 private:
  // Registers the pthread_atfork handlers, once.
  static void InstallHandlers();
  static void BeforeFork();
  static void AfterForkInParent();
  static void AfterForkInChild();
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_INDEX_FORK_GUARD_H_
