#include "disk/write_path.h"

#include <algorithm>
#include <limits>

#include "disk/header_hash.h"
#include "disk/reconcile.h"

namespace kvtier::disk {
namespace {

// Evictions a write that found the disk full may ask for before it fails:
// enough for other writers' batches in flight (which fill a small disk for
// moments) to commit, also in slow (sanitizer) builds, where 5 tries still
// lost one block in about ten two-writer runs on an 8 MiB tmpfs.
constexpr int kMaxRoomTries = 8;
// A full disk with nothing to evict waits this long before its first retry,
// twice as long before each next one (4 + 8 + ... + 512 ms, about 1 s in all).
constexpr uint64_t kRoomWaitMicros = 2000;

}  // namespace

void WritePath::Hook(DiskKillPoint point) const {
  if (*p_.kill_hook) (*p_.kill_hook)(point);
}

void WritePath::SkipBlocksOnDisk(std::vector<Item>* items) {
  std::vector<BlockKey> keys;
  std::vector<Item*> asked;
  for (Item& it : *items) {
    if (it.done) continue;
    keys.push_back(it.block->key);
    asked.push_back(&it);
  }
  if (keys.empty()) return;
  auto rows = p_.index->LookupMany(keys);
  if (!rows.ok()) {
    for (Item* it : asked) {
      it->status = rows.status();
      it->done = true;
    }
    return;
  }
  std::vector<IndexRow> candidates;
  std::vector<Item*> owners;
  for (size_t i = 0; i < asked.size(); ++i) {
    const std::optional<IndexRow>& row = (*rows)[i];
    if (row && row->sig_id == p_.sig_id && row->size == asked[i]->block->block->size()) {
      candidates.push_back(*row);
      owners.push_back(asked[i]);
    }
  }
  if (candidates.empty()) return;
  // Confirmed under the index's write lock: an eviction that has unlinked
  // the file but not yet committed holds that lock; once it commits, the
  // row is gone and the block is written again instead of vanishing.
  auto present = p_.index->TouchIfPresentMany(candidates, p_.env->NowUnixMicros());
  for (size_t i = 0; i < owners.size(); ++i) {
    if (!present.ok()) {
      owners[i]->status = present.status();
      owners[i]->done = true;
    } else if ((*present)[i]) {
      DiskCounters::Add(p_.counters->saves_deduplicated);
      owners[i]->done = true;
    }
  }
}

std::vector<Capacity::Reservation> WritePath::Reserve(std::vector<Item>* items) {
  std::vector<Capacity::Reservation> held;
  uint64_t bytes = 0, blocks = 0;
  for (const Item& it : *items) {
    if (it.done) continue;
    bytes += it.block->block->size();
    ++blocks;
  }
  if (blocks == 0) return held;
  auto all = p_.capacity->Reserve(bytes, blocks);
  if (all.ok()) {
    held.push_back(std::move(all).value());
    return held;
  }
  for (Item& it : *items) {
    if (it.done) continue;
    // Only a lot of several may fail where its blocks one by one do not
    // (one of them larger than the limit); index errors fail them all.
    auto one = blocks > 1 && all.status().IsResourceExhausted()
                   ? p_.capacity->Reserve(it.block->block->size(), 1)
                   : Result<Capacity::Reservation>(all.status());
    if (one.ok()) {
      held.push_back(std::move(one).value());
    } else {
      it.status = one.status();
      it.done = true;
    }
  }
  return held;
}

Result<std::optional<IndexRow>> WritePath::RowOfExistingFile(const BlockKey& key) {
  const std::string path = p_.layout->BlockPath(key);
  auto info = p_.env->Stat(path);
  if (!info.ok()) return info.status();
  return ReadAdoptableRow(p_.env, p_.index, path, key, *info);
}

void WritePath::Publish(Item* item) {
  const PendingBlock& p = *item->block;
  IndexRow& r = item->row;
  r.key = p.key;
  r.sig_id = p_.sig_id;
  r.size = p.block->size();
  r.created_at_us = p_.env->NowUnixMicros();
  r.last_access_us = r.created_at_us;
  r.header_hash = HeaderHash(p.block->span());
  int room_tries = 0;
  for (int attempt = 0;; ++attempt) {
    Result<PublishOutcome> published = p_.writer->Publish(p.key, p.block->span());
    if (!published.ok() && published.status().IsResourceExhausted() &&
        room_tries < kMaxRoomTries) {
      // The disk is full although the accounting let the block in: evict
      // as at the limit and try again; only a block that still does not fit
      // fails. Each retry asks for twice the room of the one before: what
      // an eviction frees can be taken before this write gets to it (the
      // index's journal growing with the eviction's own commit, other
      // writers' blocks), and a retry that frees only this block's room
      // each time can lose every race.
      ++room_tries;
      const int doublings = room_tries - 1;
      const uint64_t room = r.size > (std::numeric_limits<uint64_t>::max() >> doublings)
                                ? r.size
                                : r.size << doublings;
      auto made = p_.capacity->MakeRoom(room);
      // An eviction whose commit found no room for the index's journal has
      // still unlinked its files (it unlinks first); its rows, describing
      // files that are gone, go with the next eviction.
      const bool journal_full = !made.ok() && made.status().IsResourceExhausted();
      if (journal_full || (made.ok() && made->evicted + made->expired == 0)) {
        // Or nothing indexed to evict: the disk is full of blocks in flight
        // (other writers' batches, here and in other processes), whose
        // rows commit, or whose writes fail, in moments.
        p_.env->SleepForMicros(kRoomWaitMicros << room_tries);
      }
      if (made.ok() || journal_full) {
        --attempt;
        continue;
      }
    }
    if (!published.ok()) {
      // (MakeRoom() has just read free space afresh, if it was asked.)
      if (published.status().IsResourceExhausted()) {
        if (room_tries == 0) p_.capacity->InvalidateFreeSpace();
        p_.counters->events.NoSpace(published.status());
      }
      item->status = published.status();
      item->done = true;
      return;
    }
    item->outcome = *published;
    if (*published == PublishOutcome::kPublished) {
      if (!p_.capacity->alloc_unit_known()) {
        // One Stat per tier teaches the folder's allocation unit.
        auto info = p_.env->Stat(p_.layout->BlockPath(p.key));
        if (info.ok()) p_.capacity->NoteAllocation(*info);
      }
      return;
    }
    // Another writer's file got there first (same key, possibly other bytes:
    // another created_at). The row must describe the file on disk, not ours.
    Result<std::optional<IndexRow>> existing = RowOfExistingFile(p.key);
    if (!existing.ok() && existing.status().IsNotFound() && attempt == 0) continue;  // gone again
    if (!existing.ok()) {
      item->status = existing.status();
      item->done = true;
      return;
    }
    if (existing->has_value()) {
      r.sig_id = (*existing)->sig_id;
      r.size = (*existing)->size;
      r.header_hash = (*existing)->header_hash;
      return;
    }
    if (attempt > 0) {
      item->status = Status::Corruption("write block " + p.key.Hex() +
                                        ": an invalid file keeps taking its place");
      item->done = true;
      return;
    }
    // Not a block file for this key (a leftover of a crash or a hand edit):
    // out of the way, and ours goes in its place.
    (void)p_.quarantine->Move(p_.layout->BlockPath(p.key), p.key.Hex() + std::string(kBlockSuffix));
  }
}

void WritePath::Finish(const std::shared_ptr<PendingBlock>& p, const Status& status, uint64_t t0) {
  if (!status.ok()) {
    DiskCounters::Add(p_.counters->errors);
    p_.counters->events.WriteFailed(status);
    if (p_.options->write_failure_listener) p_.options->write_failure_listener(p->key);
  }
  if (p_.pending->Retire(p)) {
    // Erased while being written: remove what was written.
    (void)p_.env->RemoveFile(p_.layout->BlockPath(p->key));
    const BlockKey key = p->key;
    (void)p_.index->Delete(std::span<const BlockKey>(&key, 1));
  }
  p_.counters->write_latency.Record(p_.env->NowMicros() - t0);
  p_.pending->Release(p);
}

std::vector<Status> WritePath::Write(std::span<const std::shared_ptr<PendingBlock>> batch) {
  const uint64_t t0 = p_.env->NowMicros();
  std::vector<Item> items(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    items[i].block = batch[i].get();
    items[i].done = p_.pending->IsCancelled(*batch[i]);
  }
  SkipBlocksOnDisk(&items);
  std::vector<Capacity::Reservation> reservations = Reserve(&items);
  std::vector<IndexRow> rows;
  uint64_t written = 0;
  for (Item& it : items) {
    if (it.done) continue;
    Publish(&it);
    if (it.done) continue;
    rows.push_back(it.row);
    if (*it.outcome == PublishOutcome::kPublished) {
      written += p_.capacity->AllocatedFor(it.block->block->size());
    }
  }
  if (!rows.empty()) {
    p_.capacity->NoteWritten(written);
    Hook(DiskKillPoint::kBeforeIndexCommit);
    Result<std::vector<bool>> committed = p_.committer->Commit(rows);
    uint64_t bytes = 0;
    for (const IndexRow& row : rows) bytes += row.size;
    for (int room_tries = 1;
         !committed.ok() && committed.status().IsResourceExhausted() && room_tries <= kMaxRoomTries;
         ++room_tries) {
      // SQLITE_FULL: the index's journal could not grow. Eviction unlinks
      // before its own commit, so it frees the room that commit needs, even
      // when that commit finds no room itself (its rows go with the next).
      auto made = p_.capacity->MakeRoom(bytes);
      const bool journal_full = !made.ok() && made.status().IsResourceExhausted();
      if (!made.ok() && !journal_full) break;
      if (journal_full || made->evicted + made->expired == 0) {
        // Nothing of ours left to evict: other writers' batches fill the
        // disk for moments (as for a file that did not fit, above).
        p_.env->SleepForMicros(kRoomWaitMicros << room_tries);
      }
      committed = p_.committer->Commit(rows);
    }
    if (committed.ok()) Hook(DiskKillPoint::kAfterIndexCommit);
    size_t row = 0;
    for (Item& it : items) {
      if (it.done) continue;
      it.done = true;
      const bool ours = *it.outcome == PublishOutcome::kPublished;
      if (!committed.ok()) {
        // Without its row the file would be invisible to the accounting.
        // But a damaged index (Corruption) is set aside and rebuilt from
        // the block files, which adopts this one: removed, a valid block
        // would be lost to the damage.
        if (ours && !committed.status().IsCorruption()) {
          (void)p_.env->RemoveFile(p_.layout->BlockPath(it.block->key));
        }
        it.status = committed.status().WithContext("index block " + it.block->key.Hex());
      } else if (!(*committed)[row++]) {
        // The file its row describes was evicted before the row could
        // commit, and another process's may be in its place (with its own
        // row): the key is another writer's now, as for a duplicate.
        DiskCounters::Add(p_.counters->saves_deduplicated);
      } else if (ours) {
        DiskCounters::Add(p_.counters->saves_persisted);
        DiskCounters::Add(p_.counters->bytes_written, it.block->block->size());
      } else {
        DiskCounters::Add(p_.counters->saves_deduplicated);
      }
    }
  }
  reservations.clear();  // the rows count the bytes now
  std::vector<Status> out;
  out.reserve(items.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    Finish(batch[i], items[i].status, t0);
    out.push_back(std::move(items[i].status));
  }
  return out;
}

}  // namespace kvtier::disk
