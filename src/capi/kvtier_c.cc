// The C API (include/kvtier/kvtier_c.h) over the public C++ API.
//
// Every exported function runs its body inside Guard(), which turns any C++
// exception (std::bad_alloc included) into a return code and a message, so
// nothing unwinds into C. Messages live in a fixed thread-local buffer:
// recording one never allocates, so out-of-memory can still be reported.
//
// Cache handles are not pointers: kvtier_cache* holds a number that names a
// live cache in HandleTable. A call with a closed or unknown handle finds
// nothing and fails cleanly instead of touching freed memory, and a call in
// progress keeps its cache alive (shared_ptr) while another thread closes it.
#include "kvtier/kvtier_c.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <new>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bindings/cache_spec.h"
#include "capi/c_status.h"
#include "core/fork_safe_mutex.h"
#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "kvtier/logger.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::capi {
namespace {

// The Logger of one C cache: forwards to the callback kvtier_cache_set_logger
// set (none at first). A reader-writer lock, held shared while the callback
// runs, is what lets Set() promise that the old callback is done when it
// returns (its ctx may be freed next); callbacks on several threads still
// run at once. Owned with the cache (HandleTable), destroyed after it.
class CallbackLogger final : public Logger {
 public:
  using Fn = void (*)(void* ctx, int level, const char* message);

  void Set(Fn fn, void* ctx) {
    std::unique_lock<std::shared_mutex> lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
  }

  void Log(LogLevel level, std::string_view message) override {
    try {
      const std::string line(message);
      std::shared_lock<std::shared_mutex> lock(mu_);
      if (fn_ != nullptr) fn_(ctx_, static_cast<int>(level), line.c_str());
    } catch (...) {
      // Out of memory for the line: the event is lost, nothing unwinds into
      // a tier's thread.
    }
  }

 private:
  std::shared_mutex mu_;
  Fn fn_ = nullptr;  // guarded by mu_
  void* ctx_ = nullptr;
};
static_assert(static_cast<int>(LogLevel::kDebug) == KVTIER_LOG_DEBUG &&
              static_cast<int>(LogLevel::kInfo) == KVTIER_LOG_INFO &&
              static_cast<int>(LogLevel::kWarning) == KVTIER_LOG_WARNING &&
              static_cast<int>(LogLevel::kError) == KVTIER_LOG_ERROR);

// Live caches by handle number. Never destroyed: a cache the program did not
// close must not be closed by a static destructor while its threads run.
class HandleTable {
 public:
  static HandleTable& Get() {
    static HandleTable* table = new HandleTable();
    return *table;
  }

  // `logger` is the one the cache was opened with; the cache's last
  // reference keeps it alive, so no tier thread outlives it.
  kvtier_cache* Add(std::unique_ptr<TieredCache> opened, std::shared_ptr<CallbackLogger> logger) {
    std::shared_ptr<TieredCache> cache(opened.release(), [logger](TieredCache* c) { delete c; });
    MutexLock lock(&mu_);
    // Numbers never repeat, so a stale handle never names a newer cache.
    // Shifted and tagged so that no handle equals a small integer or an
    // aligned pointer.
    const uintptr_t id = (next_++ << 4) | 0x5;
    map_.emplace(id, std::move(cache));
    opened_by_.emplace(id, getpid());
    loggers_.emplace(id, std::move(logger));
    return reinterpret_cast<kvtier_cache*>(id);
  }

  std::shared_ptr<CallbackLogger> FindLogger(const kvtier_cache* handle) {
    MutexLock lock(&mu_);
    auto it = loggers_.find(reinterpret_cast<uintptr_t>(handle));
    return it == loggers_.end() ? nullptr : it->second;
  }

  std::shared_ptr<TieredCache> Find(const kvtier_cache* handle) {
    MutexLock lock(&mu_);
    auto it = map_.find(reinterpret_cast<uintptr_t>(handle));
    return it == map_.end() ? nullptr : it->second;
  }

  // The process that opened the handle; 0 for an unknown one.
  pid_t OpenedBy(const kvtier_cache* handle) {
    MutexLock lock(&mu_);
    auto it = opened_by_.find(reinterpret_cast<uintptr_t>(handle));
    return it == opened_by_.end() ? 0 : it->second;
  }

  // Keeps a cache of the parent process forever: in a forked child its
  // threads do not exist, so neither Close() nor its destructor may run.
  void Abandon(std::shared_ptr<TieredCache> cache) {
    MutexLock lock(&mu_);
    abandoned_.push_back(std::move(cache));
  }

  std::shared_ptr<TieredCache> Remove(const kvtier_cache* handle) {
    MutexLock lock(&mu_);
    auto it = map_.find(reinterpret_cast<uintptr_t>(handle));
    if (it == map_.end()) return nullptr;
    std::shared_ptr<TieredCache> cache = std::move(it->second);
    map_.erase(it);
    loggers_.erase(reinterpret_cast<uintptr_t>(handle));
    opened_by_.erase(reinterpret_cast<uintptr_t>(handle));
    return cache;
  }

 private:
  HandleTable() = default;
  // Held for one hash-table operation; never across a cache call.
  ForkSafeMutex mu_;  // a leaf lock: the child of a fork finds it free
  uintptr_t next_ GUARDED_BY(mu_) = 1;
  std::unordered_map<uintptr_t, std::shared_ptr<TieredCache>> map_ GUARDED_BY(mu_);
  std::unordered_map<uintptr_t, std::shared_ptr<CallbackLogger>> loggers_ GUARDED_BY(mu_);
  std::unordered_map<uintptr_t, pid_t> opened_by_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<TieredCache>> abandoned_ GUARDED_BY(mu_);
};

// A handle used in a process forked from the one that opened it: the
// cache's threads did not survive the fork (a load would wait for them
// forever), so every call but close fails cleanly, naming both processes.
int ForkedChild(std::string_view fn, pid_t opened_by) {
  return Fail(KVTIER_E_FAILED_PRECONDITION, fn,
              ": this cache was opened by process " + std::to_string(opened_by) + " and process " +
                  std::to_string(getpid()) +
                  " (a fork of it) cannot use it; open a new cache in this process");
}

// Looks the handle up or fails with the message every call shares: a NULL
// handle is a NULL argument (KVTIER_E_INVALID_ARGUMENT, as for every other
// pointer), a closed or unknown one is KVTIER_E_FAILED_PRECONDITION.
#define KVTIER_C_FIND_CACHE(var, handle, fn)                                            \
  if (handle == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": cache is NULL"); \
  std::shared_ptr<kvtier::TieredCache> var = HandleTable::Get().Find(handle);           \
  if (var == nullptr) {                                                                 \
    return Fail(KVTIER_E_FAILED_PRECONDITION, fn,                                       \
                ": the cache handle is closed or was never opened");                    \
  }                                                                                     \
  if (const pid_t opened_by = HandleTable::Get().OpenedBy(handle); opened_by != getpid()) { \
    return ForkedChild(fn, opened_by);                                                  \
  }

// The size of the block under `key` (0 on a miss), read through LoadShared:
// a host hit is shared, not copied, and a size query is no lookup, hit or
// miss in the stats (the load that follows is).
kvtier::Result<size_t> SizeOfBlock(kvtier::TieredCache& cache, const kvtier::BlockKey& key) {
  kvtier::SharedLoadOptions options;
  options.uncounted = true;
  auto future = cache.LoadShared(std::span<const kvtier::BlockKey>(&key, 1), std::move(options));
  if (!future.ok()) return future.status();
  auto loaded = future->Get();
  if (!loaded.ok()) return loaded.status();
  return (*loaded)[0].block == nullptr ? 0 : (*loaded)[0].block->size();
}

// Copies `text` and its NUL into out[0..cap) as the header describes.
int CopyOut(std::string_view fn, const std::string& text, char* out, size_t cap, size_t* len) {
  *len = text.size();
  if (cap <= text.size()) {
    return Fail(KVTIER_E_BUFFER_TOO_SMALL, fn,
                ": the output needs " + std::to_string(text.size() + 1) + " bytes, cap is " +
                    std::to_string(cap));
  }
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return KVTIER_OK;
}

}  // namespace
}  // namespace kvtier::capi

using namespace kvtier::capi;  // NOLINT(google-build-using-namespace): the C entry points

extern "C" {

const char* kvtier_last_error(void) { return t_last_error; }

const char* kvtier_error_name(int code) {
  switch (code) {
    case KVTIER_OK:
      return "OK";
    case KVTIER_E_NOT_FOUND:
      return "NOT_FOUND";
    case KVTIER_E_CORRUPTION:
      return "CORRUPTION";
    case KVTIER_E_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case KVTIER_E_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case KVTIER_E_IO:
      return "IO";
    case KVTIER_E_UNAVAILABLE:
      return "UNAVAILABLE";
    case KVTIER_E_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case KVTIER_E_INTERNAL:
      return "INTERNAL";
    case KVTIER_E_BUFFER_TOO_SMALL:
      return "BUFFER_TOO_SMALL";
    default:
      return "UNKNOWN";
  }
}

const char* kvtier_version(void) { return KVTIER_VERSION; }

int kvtier_block_keys(const char* model, const char* signature, uint32_t block_tokens,
                      const uint32_t* tokens, size_t n, uint8_t* keys_out, size_t* n_keys) {
  constexpr std::string_view fn = "kvtier_block_keys";
  return Guard(fn, [&]() -> int {
    if (n_keys == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": n_keys is NULL");
    *n_keys = 0;
    if (model == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": model is NULL");
    if (signature == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": signature is NULL");
    if (tokens == nullptr && n > 0) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": tokens is NULL and n > 0");
    }
    kvtier::NamespaceOptions ns;
    ns.model_id = model;
    ns.layout_signature = signature;
    ns.block_tokens = block_tokens;
    kvtier::Result<kvtier::KeyChain> chain = kvtier::KeyChain::Create(ns);
    if (!chain.ok()) return FromStatus(fn, chain.status());
    const size_t count = n / block_tokens;
    if (count > 0 && keys_out == nullptr) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": keys_out is NULL and there are full blocks");
    }
    const std::vector<kvtier::BlockKey> keys =
        chain->KeysFor(std::span<const uint32_t>(tokens, tokens == nullptr ? 0 : n));
    for (size_t i = 0; i < keys.size(); ++i) {
      std::memcpy(keys_out + i * 32, keys[i].bytes.data(), 32);
    }
    *n_keys = keys.size();
    return KVTIER_OK;
  });
}

int kvtier_layout_signature(const char* layout, char* out, size_t cap, size_t* len) {
  constexpr std::string_view fn = "kvtier_layout_signature";
  return Guard(fn, [&]() -> int {
    if (len == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": len is NULL");
    *len = 0;
    if (layout == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": layout is NULL");
    if (out == nullptr && cap > 0) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": out is NULL and cap > 0");
    }
    auto resolved = kvtier::ModelLayout::Resolve(kvtier::Env::Default(), layout);
    if (!resolved.ok()) return FromStatus(fn, resolved.status());
    return CopyOut(fn, resolved->Signature(), out, cap, len);
  });
}

int kvtier_cache_open(const char* options_json, kvtier_cache** out) {
  constexpr std::string_view fn = "kvtier_cache_open";
  return Guard(fn, [&]() -> int {
    if (out == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": out is NULL");
    *out = nullptr;
    if (options_json == nullptr) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": options_json is NULL");
    }
    auto spec = kvtier::bindings::ParseCacheSpecJson(options_json);
    if (!spec.ok()) return FromStatus(fn, spec.status());
    auto logger = std::make_shared<CallbackLogger>();
    spec->cache.info_log = logger.get();
    auto opened = kvtier::bindings::OpenCache(*spec);
    if (!opened.ok()) return FromStatus(fn, opened.status());
    *out = HandleTable::Get().Add(std::move(opened->cache), std::move(logger));
    return KVTIER_OK;
  });
}

int kvtier_cache_store(kvtier_cache* cache, const uint8_t key[32], const void* block, size_t len) {
  constexpr std::string_view fn = "kvtier_cache_store";
  return Guard(fn, [&]() -> int {
    if (key == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": key is NULL");
    if (block == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": block is NULL");
    KVTIER_C_FIND_CACHE(c, cache, fn);
    auto buffer = kvtier::BlockBuffer::CopyOf(
        std::span<const std::byte>(static_cast<const std::byte*>(block), len));
    if (!buffer.ok()) return FromStatus(fn, buffer.status());
    const kvtier::BlockKey k = KeyOf(key);
    const kvtier::SharedBlock shared =
        std::make_shared<const kvtier::BlockBuffer>(std::move(*buffer));
    return FromStatus(fn, c->Store(std::span<const kvtier::BlockKey>(&k, 1),
                                   std::span<const kvtier::SharedBlock>(&shared, 1)));
  });
}

int kvtier_cache_match(kvtier_cache* cache, const uint8_t* keys, size_t n, size_t* matched) {
  constexpr std::string_view fn = "kvtier_cache_match";
  return Guard(fn, [&]() -> int {
    if (matched == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": matched is NULL");
    *matched = 0;
    if (keys == nullptr && n > 0) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": keys is NULL and n > 0");
    }
    KVTIER_C_FIND_CACHE(c, cache, fn);
    std::vector<kvtier::BlockKey> chain(n);
    for (size_t i = 0; i < n; ++i) chain[i] = KeyOf(keys + i * 32);
    *matched = c->Match(chain).blocks;
    return KVTIER_OK;
  });
}

int kvtier_cache_load(kvtier_cache* cache, const uint8_t key[32], void* dst, size_t cap,
                      size_t* len) {
  constexpr std::string_view fn = "kvtier_cache_load";
  return Guard(fn, [&]() -> int {
    if (len == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": len is NULL");
    *len = 0;
    if (key == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": key is NULL");
    if (dst == nullptr && cap > 0) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": dst is NULL and cap > 0");
    }
    KVTIER_C_FIND_CACHE(c, cache, fn);
    const kvtier::BlockKey k = KeyOf(key);
    if (dst == nullptr) {
      // A size query (cap is 0 here): not a load, so not counted as one.
      kvtier::Result<size_t> size = SizeOfBlock(*c, k);
      if (!size.ok()) return FromStatus(fn, size.status());  // e.g. closed meanwhile
      *len = *size;
      if (*len == 0) return KVTIER_OK;  // a miss
      return Fail(KVTIER_E_BUFFER_TOO_SMALL, fn,
                  ": the block has " + std::to_string(*len) + " bytes, cap is 0");
    }
    const std::span<std::byte> dsts[] = {{static_cast<std::byte*>(dst), cap}};
    auto future = c->Load(std::span<const kvtier::BlockKey>(&k, 1), dsts);
    if (!future.ok()) return FromStatus(fn, future.status());
    auto loaded = future->Get();
    if (!loaded.ok()) {
      // With one key and one buffer, Get()'s only InvalidArgument is a
      // destination smaller than the block.
      if (loaded.status().IsInvalidArgument()) {
        // Tell the caller the size to allocate: the block itself says it.
        kvtier::Result<size_t> size = SizeOfBlock(*c, k);
        if (!size.ok()) return FromStatus(fn, size.status());
        *len = *size;
        return Fail(
            KVTIER_E_BUFFER_TOO_SMALL, fn,
            ": the block has " + std::to_string(*len) + " bytes, cap is " + std::to_string(cap));
      }
      return FromStatus(fn, loaded.status());
    }
    const kvtier::LoadedBlock& b = (*loaded)[0];
    *len = b.tier == kvtier::CacheTier::kNone ? 0 : static_cast<size_t>(b.bytes);
    return KVTIER_OK;
  });
}

int kvtier_cache_load_many(kvtier_cache* cache, const uint8_t* keys, size_t n,
                           void* const* dsts, const size_t* caps, size_t* lens) {
  constexpr std::string_view fn = "kvtier_cache_load_many";
  return Guard(fn, [&]() -> int {
    if (n > 0 && lens == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": lens is NULL");
    for (size_t i = 0; i < n; ++i) lens[i] = 0;
    if (n > 0 && (keys == nullptr || dsts == nullptr || caps == nullptr)) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": keys, dsts or caps is NULL and n > 0");
    }
    std::vector<kvtier::BlockKey> ks(n);
    std::vector<std::span<std::byte>> spans(n);
    for (size_t i = 0; i < n; ++i) {
      if (dsts[i] == nullptr && caps[i] > 0) {
        return Fail(KVTIER_E_INVALID_ARGUMENT, fn,
                    ": dsts[" + std::to_string(i) + "] is NULL and its cap > 0");
      }
      ks[i] = KeyOf(keys + i * 32);
      spans[i] = {static_cast<std::byte*>(dsts[i]), caps[i]};
    }
    KVTIER_C_FIND_CACHE(c, cache, fn);
    if (n == 0) return KVTIER_OK;
    auto future = c->Load(ks, spans);
    if (!future.ok()) return FromStatus(fn, future.status());
    auto loaded = future->Get();
    if (!loaded.ok()) {
      // Get()'s only InvalidArgument: a destination smaller than its block.
      if (loaded.status().IsInvalidArgument()) {
        return Fail(KVTIER_E_BUFFER_TOO_SMALL, fn, ": " + loaded.status().message());
      }
      return FromStatus(fn, loaded.status());
    }
    for (size_t i = 0; i < n; ++i) {
      const kvtier::LoadedBlock& b = (*loaded)[i];
      lens[i] = b.tier == kvtier::CacheTier::kNone ? 0 : static_cast<size_t>(b.bytes);
    }
    return KVTIER_OK;
  });
}

int kvtier_cache_contains(kvtier_cache* cache, const uint8_t key[32], int* tier) {
  constexpr std::string_view fn = "kvtier_cache_contains";
  return Guard(fn, [&]() -> int {
    if (tier == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": tier is NULL");
    *tier = KVTIER_TIER_NONE;
    if (key == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": key is NULL");
    KVTIER_C_FIND_CACHE(c, cache, fn);
    switch (c->Contains(KeyOf(key))) {
      case kvtier::CacheTier::kHost:
        *tier = KVTIER_TIER_HOST;
        break;
      case kvtier::CacheTier::kDisk:
        *tier = KVTIER_TIER_DISK;
        break;
      case kvtier::CacheTier::kRemote:
        *tier = KVTIER_TIER_REMOTE;
        break;
      case kvtier::CacheTier::kNone:
        break;
    }
    return KVTIER_OK;
  });
}

int kvtier_cache_erase(kvtier_cache* cache, const uint8_t key[32], int* erased) {
  constexpr std::string_view fn = "kvtier_cache_erase";
  return Guard(fn, [&]() -> int {
    if (erased != nullptr) *erased = 0;
    if (key == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": key is NULL");
    KVTIER_C_FIND_CACHE(c, cache, fn);
    auto r = c->Erase(KeyOf(key));
    if (!r.ok()) return FromStatus(fn, r.status());
    if (erased != nullptr) *erased = *r ? 1 : 0;
    return KVTIER_OK;
  });
}

int kvtier_cache_clear(kvtier_cache* cache) {
  constexpr std::string_view fn = "kvtier_cache_clear";
  return Guard(fn, [&]() -> int {
    KVTIER_C_FIND_CACHE(c, cache, fn);
    return FromStatus(fn, c->Clear().status());
  });
}

int kvtier_cache_prometheus(kvtier_cache* cache, char* out, size_t cap, size_t* len) {
  constexpr std::string_view fn = "kvtier_cache_prometheus";
  return Guard(fn, [&]() -> int {
    if (len == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": len is NULL");
    *len = 0;
    if (out == nullptr && cap > 0) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": out is NULL and cap > 0");
    }
    KVTIER_C_FIND_CACHE(c, cache, fn);
    return CopyOut(fn, c->Prometheus(), out, cap, len);
  });
}

int kvtier_cache_flush(kvtier_cache* cache) {
  constexpr std::string_view fn = "kvtier_cache_flush";
  return Guard(fn, [&]() -> int {
    KVTIER_C_FIND_CACHE(c, cache, fn);
    return FromStatus(fn, c->Flush());
  });
}

int kvtier_cache_stats_json(kvtier_cache* cache, char* out, size_t cap, size_t* len) {
  constexpr std::string_view fn = "kvtier_cache_stats_json";
  return Guard(fn, [&]() -> int {
    if (len == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": len is NULL");
    *len = 0;
    if (out == nullptr && cap > 0) {
      return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": out is NULL and cap > 0");
    }
    KVTIER_C_FIND_CACHE(c, cache, fn);
    return CopyOut(fn, c->Stats().ToJson(), out, cap, len);
  });
}

int kvtier_cache_set_logger(kvtier_cache* cache, void (*log_fn)(void*, int, const char*),
                            void* ctx) {
  constexpr std::string_view fn = "kvtier_cache_set_logger";
  return Guard(fn, [&]() -> int {
    KVTIER_C_FIND_CACHE(c, cache, fn);
    std::shared_ptr<CallbackLogger> logger = HandleTable::Get().FindLogger(cache);
    if (logger == nullptr) {
      return Fail(KVTIER_E_FAILED_PRECONDITION, fn, ": the cache handle is closed");
    }
    logger->Set(log_fn, ctx);
    return KVTIER_OK;
  });
}

int kvtier_cache_close(kvtier_cache* cache) {
  constexpr std::string_view fn = "kvtier_cache_close";
  return Guard(fn, [&]() -> int {
    if (cache == nullptr) return Fail(KVTIER_E_INVALID_ARGUMENT, fn, ": cache is NULL");
    const pid_t opened_by = HandleTable::Get().OpenedBy(cache);
    std::shared_ptr<kvtier::TieredCache> c = HandleTable::Get().Remove(cache);
    if (c == nullptr) {
      return Fail(KVTIER_E_FAILED_PRECONDITION, fn,
                  ": the cache handle is closed or was never opened");
    }
    if (opened_by != getpid()) {
      // A forked child: release the handle, join nothing (ForkedChild).
      HandleTable::Get().Abandon(std::move(c));
      return KVTIER_OK;
    }
    // Close() waits for the calls in progress on other threads; they hold
    // their own reference, so the object lives until the last one returns.
    return FromStatus(fn, c->Close());
  });
}

}  // extern "C"
