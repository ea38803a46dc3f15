// Clang thread-safety annotations (-Wthread-safety). They document which
// mutex guards what; under GCC they expand to nothing.
//
// Kept in src/host/ for now; move to src/core/ when a second component needs
// them (every macro is guarded so two copies cannot clash).
#ifndef KVTIER_HOST_THREAD_ANNOTATIONS_H_
#define KVTIER_HOST_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION_(x)
#endif

#ifndef GUARDED_BY
#define GUARDED_BY(x) KVTIER_THREAD_ANNOTATION_(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION_(pt_guarded_by(x))
#endif
#ifndef REQUIRES
#define REQUIRES(...) KVTIER_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) KVTIER_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#endif

#endif  // KVTIER_HOST_THREAD_ANNOTATIONS_H_
