// ForkSafeMutex: a process-wide Mutex that fork() never leaves held in the
// child.
//
// fork() copies memory, not threads: a mutex another thread held at that
// instant stays held in the child for ever, and the child's first use of
// it (a writer's temp-file registry, a layout's verifier, the C API's
// handle table) waits for good. pthread_atfork handlers take every
// ForkSafeMutex before fork() (in the order they were made) and release
// them on both sides after it, so the child's copy is unlocked and whole.
//
// For leaf locks only: held briefly, with no other lock taken and nothing
// waited on under them (the handlers take them all at once). Meant for
// objects that live as long as the process; a destroyed one leaves the
// list.
//
// Thread safety: as Mutex. One process-wide mutex guards the list.
#ifndef KVTIER_CORE_FORK_SAFE_MUTEX_H_
#define KVTIER_CORE_FORK_SAFE_MUTEX_H_

#include "core/mutex.h"

namespace kvtier {

class ForkSafeMutex : public Mutex {
 public:
  ForkSafeMutex();
  ~ForkSafeMutex();
  ForkSafeMutex(const ForkSafeMutex&) = delete;
  ForkSafeMutex& operator=(const ForkSafeMutex&) = delete;

  // Registers the fork handlers now if no ForkSafeMutex has yet. Handlers
  // registered after this run their before-fork part first: a part that
  // waits for threads which may take a ForkSafeMutex calls this first.
  static void InstallForkHandlers();
};

}  // namespace kvtier

#endif  // KVTIER_CORE_FORK_SAFE_MUTEX_H_
