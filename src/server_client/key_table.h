// KeyTable: the arena's key -> slot table (docs/server.md, "The arena"),
// which clients read without asking the daemon. Open addressing with
// linear probing over a power-of-two array of 64-bit words in the shared
// mapping, at least twice as many words as slots (so an empty word always
// ends a probe): a word is 0 (empty) or (tag << 32) | (slot + 1), where the
// tag is 32 mixed bits of the key and its low bits are the word's home.
// Erase shifts the words after a hole back (no tombstones), so the table
// never degrades however many blocks come and go.
//
// A table word says only "this slot may hold a key of this tag": a reader
// confirms the slot's own header (its key) before it believes it, and
// Load still checks the slot after copying (generation, key, length, the
// block's checksums). A read racing an erase may miss a key that is there:
// a miss, never a wrong slot believed.
//
// Ownership: a view; the words belong to the arena's mapping.
// Thread safety: Insert and Erase from one thread at a time (the daemon's
// SlotIndex, under its mutex); Find from any thread of any process at the
// same time (words are read and written as atomics).
#ifndef KVTIER_SERVER_CLIENT_KEY_TABLE_H_
#define KVTIER_SERVER_CLIENT_KEY_TABLE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>

#include "kvtier/block_key.h"

namespace kvtier::server {

class KeyTable {
 public:
  // The words a table for `slot_count` slots takes: a power of two, at
  // least 2 x slot_count (and 2).
  static uint64_t WordsFor(uint32_t slot_count);

  // REQUIRES: words.size() is a power of two (WordsFor of some slot count).
  explicit KeyTable(std::span<uint64_t> words) : words_(words), mask_(words.size() - 1) {}

  // Enters `slot` under `key`. REQUIRES: the key is not in the table, and
  // fewer entries than half the words.
  void Insert(const BlockKey& key, uint32_t slot);
  // Removes the entry of `slot` under `key`; false if there is none.
  bool Erase(const BlockKey& key, uint32_t slot);

  // The first slot entered under `key`'s tag for which is_key(slot) says
  // it holds `key`; nullopt when the probe reaches an empty word (or has
  // looked at every word: a table some client scribbled over).
  template <typename IsKey>
  std::optional<uint32_t> Find(const BlockKey& key, IsKey&& is_key) const {
    const uint32_t tag = Tag(key);
    for (uint64_t i = tag & mask_, n = 0; n <= mask_; i = (i + 1) & mask_, ++n) {
      const uint64_t w = Load(i);
      if (w == 0) return std::nullopt;
      if (static_cast<uint32_t>(w >> 32) == tag && is_key(static_cast<uint32_t>(w) - 1)) {
        return static_cast<uint32_t>(w) - 1;
      }
    }
    return std::nullopt;
  }

  static uint32_t Tag(const BlockKey& key);

 private:
  uint64_t Load(uint64_t i) const {
    return std::atomic_ref<uint64_t>(words_[i]).load(std::memory_order_acquire);
  }
  void Store(uint64_t i, uint64_t w) {
    std::atomic_ref<uint64_t>(words_[i]).store(w, std::memory_order_release);
  }
  uint64_t Home(uint64_t word) const { return (word >> 32) & mask_; }

  std::span<uint64_t> words_;
  uint64_t mask_;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_CLIENT_KEY_TABLE_H_
