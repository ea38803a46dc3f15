#include "disk/read_path.h"

#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <string>

#include "core/saturating_time.h"
#include "disk/reconcile.h"

namespace kvtier::disk {
namespace {

// Access times buffered before the maintenance thread is woken to flush them.
constexpr size_t kTouchFlushThreshold = 4096;

// Blocks a lane of partial reads asks the device for ahead of the one it
// reads (ReadPath::LoadTensorBuffers).
constexpr size_t kPartialLookahead = 2;
// ... of whole reads: one, so that each lane's next file is on its way
// while it verifies and hands out the one it has (whole files are large:
// more would hold page cache that a long load evicts before it reads it).
constexpr size_t kWholeLookahead = 1;
// ... once the lane has read a block under kSmallBlockBytes: for blocks of
// a few KiB each request waits on the device for as long as a large one, and
// the page cache they hold is small.
constexpr size_t kSmallWholeLookahead = 8;
constexpr uint64_t kSmallBlockBytes = 256 << 10;

}  // namespace

void ReadPath::QuarantineBlock(const IndexRow& row) {
  (void)p_.quarantine->Move(p_.layout->BlockPath(row.key),
                            row.key.Hex() + std::string(kBlockSuffix));
  (void)p_.index->DeleteIfSame(row);
  p_.touches->Forget(row.key);
}

void ReadPath::NoteTouch(const BlockKey& key) {
  if (p_.touches->Touch(key, p_.env->NowUnixMicros()) >= kTouchFlushThreshold) p_.touches_due();
}

bool ReadPath::Expired(const IndexRow& row) {
  if (p_.options->retention_seconds <= 0) return false;
  return row.created_at_us <
         CutoffBefore(p_.env->NowUnixMicros(), SecondsToMicros(p_.options->retention_seconds));
}

Result<std::optional<size_t>> ReadPath::ReadFromDisk(const BlockKey& key, IndexRow row,
                                                     const DstFn& dst, const TensorMask* mask,
                                                     uint64_t* bytes_read,
                                                     PrefetchedRead* prefetched) {
  const std::optional<size_t> miss;
  for (int attempt = 0;; ++attempt) {
    if (row.sig_id != p_.sig_id) {
      DiskCounters::Add(p_.counters->incompatible_misses);
      return miss;
    }
    if (Expired(row)) {
      Status rm = p_.env->RemoveFile(p_.layout->BlockPath(key));
      if (rm.ok() || rm.IsNotFound()) {
        (void)p_.index->DeleteIfSame(row);
        DiskCounters::Add(p_.counters->expired);
      }
      return miss;
    }
    if (row.size > SIZE_MAX) return miss;
    KVTIER_ASSIGN_OR_RETURN(std::span<std::byte> buf, dst(row.size));
    Status error;
    uint64_t read = row.size;
    // A prefetch was of the first row's file.
    PrefetchedRead* ahead = attempt == 0 ? prefetched : nullptr;
    const ReadOutcome outcome =
        mask != nullptr ? p_.reader->ReadTensors(row, *mask, buf, &read, &error, ahead)
                        : p_.reader->Read(row, buf, &error,
                                          ahead != nullptr ? std::move(ahead->file) : nullptr);
    if (outcome == ReadOutcome::kOk) {
      NoteTouch(key);
      if (bytes_read != nullptr) *bytes_read = read;
      return std::optional<size_t>(row.size);
    }
    if (outcome == ReadOutcome::kError) {
      DiskCounters::Add(p_.counters->errors);
      p_.counters->events.ReadFailed(error);
      return miss;
    }
    // Gone or bad: judge the file by the row as it is now, not as it was
    // when this load looked it up (another process may have replaced the
    // block since).
    auto fresh = p_.index->Lookup(key);
    if (!fresh.ok()) {
      DiskCounters::Add(p_.counters->errors);
      return miss;
    }
    if (!fresh->has_value()) return miss;
    if (!SameFile(**fresh, row)) {
      if (attempt > 0) return miss;  // changing under us: a miss, nothing dropped
      row = **fresh;
      continue;
    }
    if (outcome == ReadOutcome::kGone) {
      // Evicted by another process, or removed by hand: drop the row.
      (void)p_.index->DeleteIfSame(row);
      p_.touches->Forget(key);
      return miss;
    }
    // A valid file of another writer in place of the row's (published while
    // an eviction of the row's file had not committed yet) is not damage:
    // describe it and read it.
    auto other = ReadRowOfAnotherFile(p_.env, p_.index, *p_.layout, row);
    if (!other.ok()) {
      DiskCounters::Add(p_.counters->errors);
      return miss;
    }
    if (!other->has_value()) {
      QuarantineBlock(row);
      return miss;
    }
    (void)p_.index->ReplaceIfSame(row, **other);
    if (attempt > 0) return miss;
    row = **other;
  }
}

Result<std::optional<size_t>> ReadPath::ReadFileFirst(const BlockKey& key, const DstFn& dst,
                                                      PrefetchedRead* prefetched) {
  uint64_t size = 0;
  Status error;
  const ReadOutcome outcome = p_.reader->ReadUnindexed(
      key, dst, &size, &error, prefetched != nullptr ? std::move(prefetched->file) : nullptr);
  if (outcome == ReadOutcome::kOk) {
    NoteTouch(key);
    return std::optional<size_t>(size);
  }
  if (outcome == ReadOutcome::kNoBuffer) return error;
  if (outcome == ReadOutcome::kError) {
    DiskCounters::Add(p_.counters->errors);
    p_.counters->events.ReadFailed(error);
    return std::optional<size_t>();
  }
  auto row = p_.index->Lookup(key);
  if (!row.ok()) {
    DiskCounters::Add(p_.counters->errors);
    return std::optional<size_t>();
  }
  if (!row->has_value()) return std::optional<size_t>();  // an unindexed file: the reconcile's
  return ReadFromDisk(key, **row, dst);
}

std::optional<PrefetchedRead> ReadPath::PrefetchAhead(const BlockKey& key, const Located& where,
                                                      const TensorMask* mask) {
  if (where.pending != nullptr) return std::nullopt;  // served from memory
  if (mask == nullptr) {
    // The read goes through the file opened to ask.
    if (where.unindexed ||
        (where.row.has_value() && where.row->sig_id == p_.sig_id && !Expired(*where.row))) {
      std::unique_ptr<RandomAccessFile> file = p_.reader->PrefetchWhole(key);
      if (file != nullptr) return PrefetchedRead{{}, std::move(file)};
    }
    return std::nullopt;
  }
  // Only a partial read of a row's file that ReadFromDisk will read.
  if (!where.row.has_value()) return std::nullopt;
  const IndexRow& row = *where.row;
  if (row.sig_id != p_.sig_id || Expired(row)) return std::nullopt;
  try {
    return p_.reader->PrefetchTensors(row, *mask);
  } catch (const std::bad_alloc&) {
    return std::nullopt;  // advice only: the read itself reports what it lacks
  }
}

std::vector<ReadPath::Located> ReadPath::Locate(std::span<const BlockKey> keys, bool need_rows) {
  std::vector<Located> where(keys.size());
  std::vector<BlockKey> on_disk;
  std::vector<size_t> on_disk_index;
  // A lookup per key costs as much as reading a small file: only a load
  // that must judge the row's age looks it up before the file.
  const bool file_first = p_.options->retention_seconds <= 0 && !need_rows;
  for (size_t i = 0; i < keys.size(); ++i) {
    where[i].pending = p_.pending->Find(keys[i]);
    if (where[i].pending != nullptr) continue;
    if (file_first) {
      where[i].unindexed = true;
      continue;
    }
    on_disk.push_back(keys[i]);
    on_disk_index.push_back(i);
  }
  if (on_disk.empty()) return where;
  auto rows = p_.index->LookupMany(on_disk);
  if (!rows.ok()) {
    DiskCounters::Add(p_.counters->errors);
    return where;
  }
  for (size_t j = 0; j < on_disk.size(); ++j) where[on_disk_index[j]].row = std::move((*rows)[j]);
  return where;
}

Result<std::optional<size_t>> ReadPath::LoadLocated(const BlockKey& key, Located where,
                                                    const DstFn& dst, const TensorMask* mask,
                                                    PrefetchedRead* prefetched) {
  DiskCounters::Add(p_.counters->loads);
  const uint64_t t0 = p_.env->NowMicros();
  Result<std::optional<size_t>> r = std::optional<size_t>();
  std::optional<uint64_t> read;  // a partial read's bytes
  if (where.pending != nullptr) {
    const BlockBuffer& b = *where.pending;
    KVTIER_ASSIGN_OR_RETURN(std::span<std::byte> buf, dst(b.size()));
    std::memcpy(buf.data(), b.data(), b.size());
    DiskCounters::Add(p_.counters->hits_pending);
    r = std::optional<size_t>(b.size());
  } else if (where.unindexed) {
    r = ReadFileFirst(key, dst, prefetched);
  } else if (where.row.has_value()) {
    uint64_t n = 0;
    r = ReadFromDisk(key, *where.row, dst, mask, &n, prefetched);
    if (mask != nullptr) read = n;
  }
  if (!r.ok()) return r;
  if (r->has_value()) {
    DiskCounters::Add(p_.counters->hits);
    DiskCounters::Add(p_.counters->bytes_read, read.value_or(**r));
    p_.counters->load_latency.Record(p_.env->NowMicros() - t0);
  } else {
    DiskCounters::Add(p_.counters->misses);
  }
  return r;
}

Result<std::optional<size_t>> ReadPath::Load(const BlockKey& key, std::span<std::byte> dst) {
  if (closed()) {
    return Status::FailedPrecondition("DiskTier::Load: the tier is closed");
  }
  std::vector<Located> where = Locate(std::span<const BlockKey>(&key, 1));
  return LoadLocated(key, std::move(where[0]), [&](uint64_t size) -> Result<std::span<std::byte>> {
    if (size > dst.size()) {
      return Status::InvalidArgument("DiskTier::Load: destination buffer of " +
                                     std::to_string(dst.size()) + " bytes is smaller than block " +
                                     key.Hex() + " (" + std::to_string(size) + " bytes)");
    }
    return dst.first(size);
  });
}

std::vector<Result<std::optional<size_t>>> ReadPath::LoadMany(
    std::span<const BlockKey> keys, std::span<const std::span<std::byte>> dsts) {
  std::vector<Result<std::optional<size_t>>> results(
      keys.size(), Status::Internal("DiskTier::LoadMany: not run"));
  if (keys.size() != dsts.size()) {
    for (auto& r : results) {
      r = Status::InvalidArgument("DiskTier::LoadMany: " + std::to_string(keys.size()) +
                                  " keys but " + std::to_string(dsts.size()) + " buffers");
    }
    return results;
  }
  if (closed()) {
    for (auto& r : results)
      r = Status::FailedPrecondition("DiskTier::LoadMany: the tier is closed");
    return results;
  }
  std::vector<Located> where = Locate(keys);
  p_.runner->Run(keys.size(), [&](size_t i) {
    std::span<std::byte> d = dsts[i];
    results[i] = LoadLocated(
        keys[i], std::move(where[i]), [&](uint64_t size) -> Result<std::span<std::byte>> {
          if (size > d.size()) {
            return Status::InvalidArgument("DiskTier::LoadMany: destination buffer of " +
                                           std::to_string(d.size()) +
                                           " bytes is smaller than block " + keys[i].Hex() + " (" +
                                           std::to_string(size) + " bytes)");
          }
          return d.first(size);
        });
  });
  return results;
}

void ReadPath::LoadBuffers(std::span<const BlockKey> keys, const DiskTier::BufferAllocator& alloc,
                           const DiskTier::LoadedBufferCallback& done) {
  LoadTensorBuffers(keys, {}, alloc, done);
}

void ReadPath::LoadTensorBuffers(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                                 const DiskTier::BufferAllocator& alloc,
                                 const DiskTier::LoadedBufferCallback& done) {
  if (keys.empty()) return;
  // A mask that selects nothing special is a whole read (empty = all).
  auto mask_of = [&](size_t i) -> const TensorMask* {
    return i < masks.size() && !masks[i].empty() ? &masks[i] : nullptr;
  };
  bool partial = false;
  for (size_t i = 0; i < keys.size(); ++i) partial = partial || mask_of(i) != nullptr;
  if (closed()) {
    for (size_t i = 0; i < keys.size(); ++i) {
      done(i, Status::FailedPrecondition("DiskTier::LoadBuffers: the tier is closed"));
    }
    return;
  }
  std::unique_ptr<std::atomic<bool>[]> reported;
  try {
    reported = std::make_unique<std::atomic<bool>[]>(keys.size());
    std::vector<Located> where = Locate(keys, partial);
    // Returns the bytes of the block it read (0: none).
    auto load = [&](size_t i, PrefetchedRead* prefetched) -> uint64_t {
      Result<std::optional<BlockBuffer>> out = std::optional<BlockBuffer>();
      try {
        std::optional<BlockBuffer> buf;
        auto r = LoadLocated(
            keys[i], std::move(where[i]),
            [&](uint64_t size) -> Result<std::span<std::byte>> {
              buf.reset();  // an earlier row's buffer goes back first
              KVTIER_ASSIGN_OR_RETURN(BlockBuffer b, alloc(static_cast<size_t>(size)));
              if (b.size() != size) {
                return Status::InvalidArgument(
                    "DiskTier::LoadBuffers: the allocator returned " + std::to_string(b.size()) +
                    " bytes for block " + keys[i].Hex() + " of " + std::to_string(size) + " bytes");
              }
              buf = std::move(b);
              return buf->mutable_span();
            },
            mask_of(i), prefetched);
        if (!r.ok()) {
          out = r.status();
        } else if (r->has_value()) {
          out = std::move(buf);
        }
      } catch (const std::bad_alloc&) {
        out = Status::ResourceExhausted("DiskTier::LoadBuffers: out of memory reading block " +
                                        keys[i].Hex());
      }
      const uint64_t bytes = out.ok() && out->has_value() ? (*out)->size() : 0;
      reported[i].store(true, std::memory_order_relaxed);
      done(i, std::move(out));
      return bytes;
    };
    // A lane asks the device for its next block (PrefetchAhead) before it
    // reads the one it has, so the device holds more requests than there
    // are lanes while they verify and hand out: partial reads are a few
    // small preads per block, each waiting on the device; a whole read's
    // verification and hand-out take as long as its read from a fast disk.
    std::atomic<size_t> next{0};
    const size_t lanes = std::min(keys.size(), p_.runner->lanes());
    p_.runner->Run(lanes, [&](size_t) {
      size_t lookahead = partial ? kPartialLookahead : kWholeLookahead;
      // The lane's blocks in order: the first is read next, the others
      // were asked for.
      std::deque<std::pair<size_t, std::optional<PrefetchedRead>>> mine;
      while (true) {
        while (mine.size() <= lookahead) {
          const size_t j = next.fetch_add(1, std::memory_order_relaxed);
          if (j >= keys.size()) break;
          // The lane's first block is read at once: nothing to ask ahead.
          mine.emplace_back(
              j, mine.empty() ? std::nullopt : PrefetchAhead(keys[j], where[j], mask_of(j)));
        }
        if (mine.empty()) break;
        auto& [i, ahead] = mine.front();
        const uint64_t bytes = load(i, ahead ? &*ahead : nullptr);
        mine.pop_front();
        if (!partial && bytes != 0) {
          lookahead = bytes < kSmallBlockBytes ? kSmallWholeLookahead : kWholeLookahead;
        }
      }
    });
  } catch (const std::bad_alloc&) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (reported == nullptr || !reported[i].load(std::memory_order_relaxed)) {
        done(i, Status::ResourceExhausted("DiskTier::LoadBuffers: out of memory"));
      }
    }
  }
}

}  // namespace kvtier::disk
