// XXH3-128 (seed 0) through libxxhash's x86 dispatcher, which picks the
// widest vector unit the CPU has (AVX-512, AVX2, SSE2) at run time; the
// plain entry points of Debian's build are SSE2 only, 4x slower on AVX-512.
// The hash value is the same either way. The block file's checksums and the
// serve arena's slot sums use it. Defined in core/block_file_error.cc.
#ifndef KVTIER_CORE_XXH3_H_
#define KVTIER_CORE_XXH3_H_

#include <cstddef>

#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's size, for stack states
#endif
#include <xxhash.h>

namespace kvtier::internal {

XXH128_hash_t Xxh3Hash128(const void* data, size_t size);
void Xxh3Update128(XXH3_state_t* state, const void* data, size_t size);

}  // namespace kvtier::internal

#endif  // KVTIER_CORE_XXH3_H_
