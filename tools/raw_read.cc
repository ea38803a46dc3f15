#include "raw_read.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "kvtier/block_buffer.h"
#include "kvtier/disk_paths.h"

namespace kvtier::cli {

Result<std::vector<std::string>> BlockFiles(Env* env, const std::string& dir,
                                            const std::vector<BlockKey>& keys) {
  std::vector<std::string> files;
  files.reserve(keys.size());
  for (const BlockKey& k : keys) {
    std::string path = DiskBlockPath(dir, k);
    Result<FileInfo> info = env->Stat(path);
    if (!info.ok() || info->type != FileType::kRegular) {
      return Status::Internal("expected the block file " + path + " (" +
                              (info.ok() ? "not a regular file" : info.status().message()) + ")");
    }
    files.push_back(std::move(path));
  }
  return files;
}

Result<double> RawRead(Env* env, const std::vector<std::string>& files,
                       const std::vector<std::vector<BlockFileRange>>& ranges, uint32_t threads,
                       RawReadMode mode, std::vector<BlockBuffer>* kept_buffers) {
  const bool direct = mode == RawReadMode::kDirect;
  if (!ranges.empty() && ranges.size() != files.size()) {
    return Status::InvalidArgument("RawRead: " + std::to_string(ranges.size()) + " range lists for " +
                                   std::to_string(files.size()) + " files");
  }
  threads = std::max<uint32_t>(threads, 1);
  uint64_t largest = 0;
  for (const std::string& f : files) {
    KVTIER_ASSIGN_OR_RETURN(FileInfo info, env->Stat(f));
    largest = std::max(largest, info.size);
  }
  // O_DIRECT reads whole pages: the last one ends past the file's end.
  constexpr uint64_t kPage = BlockBuffer::kAlignment;
  if (direct) largest = (largest + kPage - 1) / kPage * kPage;
  // One buffer per thread, or (kept) the caller's, one per file; faulted
  // in before the clock starts.
  const bool kept = mode == RawReadMode::kBufferedKept;
  if (kept && kept_buffers == nullptr) {
    return Status::InvalidArgument("RawRead: kBufferedKept needs the caller's buffers");
  }
  std::vector<BlockBuffer> own;
  std::vector<BlockBuffer>& bufs = kept ? *kept_buffers : own;
  if (kept && !bufs.empty() && (bufs.size() != files.size() || bufs[0].size() < largest)) {
    bufs.clear();  // another set of files
  }
  while (bufs.size() < (kept ? files.size() : threads)) {
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer b, BlockBuffer::Allocate(largest));
    std::memset(b.data(), 0, b.size());
    bufs.push_back(std::move(b));
  }
  std::vector<Status> errors(threads);
  std::vector<std::thread> pool;
  const uint64_t t0 = env->NowMicros();
  for (uint32_t t = 0; t < threads; ++t) {
    pool.push_back(env->StartThread([&, t] {
      for (size_t i = t; i < files.size(); i += threads) {
        ReadFileOptions ro;
        ro.direct_io = direct;
        Result<std::unique_ptr<RandomAccessFile>> f = env->OpenForRead(files[i], ro);
        if (!f.ok()) {
          errors[t] = f.status();
          return;
        }
        const uint64_t size = (*f)->size();
        std::vector<BlockFileRange> whole = {{0, size}};
        const std::vector<BlockFileRange>& todo =
            ranges.empty() || ranges[i].empty() ? whole : ranges[i];
        for (const BlockFileRange& r : todo) {
          if (r.begin > r.end || r.end > size) {
            errors[t] = Status::InvalidArgument("RawRead: a range past the end of " + files[i]);
            return;
          }
        }
        // Every range of a file asked of the device at once (advice only;
        // O_DIRECT reads skip the page cache that advice fills).
        if (todo.size() > 1 && !direct) {
          for (const BlockFileRange& r : todo) (void)(*f)->Prefetch(r.begin, r.end - r.begin);
        }
        for (const BlockFileRange& r : todo) {
          // O_DIRECT: one request of the whole pages around the range; the
          // device stops the last one at the end of the file (a short read,
          // not an error).
          const uint64_t begin = direct ? r.begin / kPage * kPage : r.begin;
          const uint64_t end = direct ? (r.end + kPage - 1) / kPage * kPage : r.end;
          Result<size_t> n =
              (*f)->ReadAt(begin, bufs[kept ? i : t].mutable_span().subspan(begin, end - begin));
          if (!n.ok() || *n != std::min(end, size) - begin) {
            errors[t] = n.ok() ? Status::IOError("short read of " + files[i], 0) : n.status();
            return;
          }
        }
      }
    }));
  }
  for (std::thread& th : pool) th.join();
  const uint64_t t1 = env->NowMicros();
  for (Status& e : errors) KVTIER_RETURN_IF_ERROR(e);
  return static_cast<double>(std::max<uint64_t>(t1 - t0, 1)) / 1e6;
}

}  // namespace kvtier::cli
