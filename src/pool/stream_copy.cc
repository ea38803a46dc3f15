#include "pool/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace kvtier::pool_internal {

void StreamCopy(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__x86_64__)
  if (n >= kStreamFromBytes) {
    const size_t head = (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64;
    std::memcpy(dst, src, head);
    const size_t body = (n - head) / 64 * 64;
    std::byte* d = dst + head;
    const std::byte* s = src + head;
    for (size_t i = 0; i < body; i += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    _mm_sfence();
    std::memcpy(d + body, s + body, n - head - body);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

}  // namespace kvtier::pool_internal
