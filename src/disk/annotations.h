// Clang thread-safety annotations (no-ops for other compilers).
#ifndef KVTIER_DISK_ANNOTATIONS_H_
#define KVTIER_DISK_ANNOTATIONS_H_

#if defined(__clang__)
#define KVTIER_GUARDED_BY(x) __attribute__((guarded_by(x)))
#define KVTIER_REQUIRES(...) __attribute__((requires_capability(__VA_ARGS__)))
#else
#define KVTIER_GUARDED_BY(x)
#define KVTIER_REQUIRES(...)
#endif

#endif  // KVTIER_DISK_ANNOTATIONS_H_
