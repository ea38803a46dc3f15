// Clang thread-safety annotations (no-ops on other compilers). Mark each
// mutex-guarded member GUARDED_BY(mu_); helpers that need the lock end in
// `Locked` and carry REQUIRES(mu_).
#ifndef KVTIER_CORE_THREAD_ANNOTATIONS_H_
#define KVTIER_CORE_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION_(x)
#endif

#define GUARDED_BY(x) KVTIER_THREAD_ANNOTATION_(guarded_by(x))
#define PT_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION_(pt_guarded_by(x))
#define REQUIRES(...) KVTIER_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) KVTIER_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define ACQUIRED_AFTER(...) KVTIER_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) KVTIER_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define CAPABILITY(x) KVTIER_THREAD_ANNOTATION_(capability(x))
#define SCOPED_CAPABILITY KVTIER_THREAD_ANNOTATION_(scoped_lockable)
#define ACQUIRE(...) KVTIER_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define RELEASE(...) KVTIER_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KVTIER_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) KVTIER_THREAD_ANNOTATION_(assert_capability(x))
#define RETURN_CAPABILITY(x) KVTIER_THREAD_ANNOTATION_(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS KVTIER_THREAD_ANNOTATION_(no_thread_safety_analysis)

#endif  // KVTIER_CORE_THREAD_ANNOTATIONS_H_
