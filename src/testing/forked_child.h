// ExitForkedChild: how a test's forked child ends.
//
// A test that forks while other threads run (to check what the child
// inherits) leaves those threads in the child's image as threads that were
// never joined. ThreadSanitizer's exit check reports each as a thread leak
// and turns the child's exit code into 66, which the parent then reads as
// the child's verdict. The child ends with the exit_group system call
// itself, which no sanitizer intercepts; nothing else of the child's exit
// differs from _exit().
#ifndef KVTIER_TESTING_FORKED_CHILD_H_
#define KVTIER_TESTING_FORKED_CHILD_H_

#include <sys/syscall.h>
#include <unistd.h>

namespace kvtier::testing {

[[noreturn]] inline void ExitForkedChild(int code) {
  ::syscall(SYS_exit_group, code);
  _exit(code);  // not reached
}

}  // namespace kvtier::testing

#endif  // KVTIER_TESTING_FORKED_CHILD_H_
