// `kvtier bench disk`: the disk tier against the raw limit of the same disk
// (DESIGN.md §6).
//
//   kvtier bench disk --dir D (--layout P | --block-bytes N) --blocks M
//                     [--threads T] [--durability checksum|fsync]
//                     [--drop-caches] [--read-io auto|buffered|direct]
//                     [--read-api load|load-buffers [--batch-keys K]]
//                     [--commit-batch-bytes N] [--rounds R] [--keep] [--json]
//
// In one run, with the same M block files (generated in RAM first) and T
// threads on both sides:
//   raw write   T threads write each file to a temp name in its hashed
//               subfolder, close and rename it (kFsync: fsync the file
//               before the rename and the folder after it, as the tier
//               does), then one syncfs;
//   our write   Store() of every block (T writer threads), Flush(), syncfs;
//   raw read    T threads open, pread the whole file (buffered), close;
//   our read    T threads Load() from a reopened tier, every block
//               verified (structure, key, signature, checksum); with
//               --read-api load-buffers, one caller LoadBuffers() K keys at
//               a time (the restore path's call: one index query per batch)
//               into recycled buffers, T threads reading in all (T - 1 read
//               threads and the caller);
//   reopen      time from Open() of the folder to the first hit served
//               (the reconcile continues in the background), and to the
//               end of that background reconcile.
// --drop-caches drops the page cache (root) before each read and the reopen,
// so reads are cold. --read-io picks how the tier reads: auto (its defaults,
// DiskTierOptions::direct_io_reads: O_DIRECT from direct_io_min_bytes),
// buffered, or direct (O_DIRECT at every size). --commit-batch-bytes sets
// DiskTierOptions::commit_batch_bytes. The phases run --rounds times
// (default 2), alternating which side goes first, and each side's best
// round is reported. --block-bytes N uses a one-tensor U8 layout whose data
// section is N bytes.
//   --json: {"blocks","block_bytes","write_GBps","read_GBps","reopen_s","reconcile_s",
//   "raw_write_GBps","raw_read_GBps","write_ratio","read_ratio",
//   "durability","threads","drop_caches","rounds","read_io","read_api","batch_keys",
//   "commit_batch_bytes"}
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "bench_util.h"
#include "command.h"
#include "config_flag.h"
#include "kvtier/block_key.h"
#include "kvtier/disk_paths.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"
#include "kvtier/file_tree.h"
#include "kvtier/layout.h"
#include "progress.h"
#include "synth/block_generator.h"
#include "stderr_logger.h"

namespace kvtier::cli {
namespace {

struct BenchDiskArgs {
  std::string dir;
  std::string layout;
  uint64_t block_bytes = 0;
  uint64_t blocks = 0;
  uint32_t threads = 4;
  std::string durability = "checksum";
  bool drop_caches = false;
  bool keep = false;
  uint32_t rounds = 2;
  std::string read_io = "auto";
  std::string read_api = "load";
  uint64_t batch_keys = 64;
  uint64_t commit_batch_bytes = DiskTierOptions().commit_batch_bytes;
  CLI::Option* layout_opt = nullptr;
  CLI::Option* block_bytes_opt = nullptr;
  ConfigFlag config;
};

// Runs fn(i) for i in [0, n) on `threads` threads (i ≡ thread mod threads);
// returns the first error.
Status Parallel(uint32_t threads, size_t n, const std::function<Status(size_t)>& fn) {
  std::vector<std::thread> pool;
  std::vector<Status> errors(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = t; i < n; i += threads) {
        Status s = fn(i);
        if (!s.ok()) {
          errors[t] = s;
          return;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  for (Status& s : errors) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

struct Figures {
  double write_s = 0, read_s = 0, raw_write_s = 0, raw_read_s = 0, reopen_s = 0, reconcile_s = 0;
};

// The raw side's hashed subfolders, made before the clock starts.
Status MakeRawFolders(Env* env, const std::string& root) {
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(DiskBlocksDir(root), 0700));
  for (int p = 0; p < 256; ++p) {
    KVTIER_RETURN_IF_ERROR(env->CreateDir(DiskBlockSubdir(root, static_cast<uint8_t>(p)), 0700));
  }
  return env->SyncFileSystem(root);
}

Status RawWrite(Env* env, const std::string& root, const std::vector<BlockKey>& keys,
                const std::vector<SharedBlock>& blocks, uint32_t threads, bool fsync) {
  std::atomic<uint64_t> counter{0};
  return Parallel(threads, keys.size(), [&](size_t i) -> Status {
    const std::string final_path = DiskBlockPath(root, keys[i]);
    const std::string tmp = DiskBlockTempPath(root, keys[i], env->ProcessId(), counter++);
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, env->CreateFile(tmp, {}));
    KVTIER_RETURN_IF_ERROR(f->Append(blocks[i]->span()));
    if (fsync) KVTIER_RETURN_IF_ERROR(f->Sync());
    KVTIER_RETURN_IF_ERROR(f->Close());
    KVTIER_RETURN_IF_ERROR(env->RenameFile(tmp, final_path));
    if (fsync) KVTIER_RETURN_IF_ERROR(env->SyncDir(DiskBlockSubdir(root, keys[i].bytes[0])));
    return Status::Ok();
  });
}

Status RawRead(Env* env, const std::string& root, const std::vector<BlockKey>& keys,
               uint64_t max_size, uint32_t threads) {
  std::vector<BlockBuffer> bufs;
  for (uint32_t t = 0; t < threads; ++t) {
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer b, BlockBuffer::Allocate(max_size));
    bufs.push_back(std::move(b));
  }
  return Parallel(threads, keys.size(), [&](size_t i) -> Status {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f,
                            env->OpenForRead(DiskBlockPath(root, keys[i]), {}));
    BlockBuffer& buf = bufs[i % threads];
    KVTIER_ASSIGN_OR_RETURN(size_t n, f->ReadAt(0, buf.mutable_span().first(f->size())));
    if (n != f->size()) return Status::IOError("short read of " + DiskBlockPath(root, keys[i]), 0);
    return Status::Ok();
  });
}

int Run(const BenchDiskArgs& a, const CommonFlags& flags) {
  Env* env = Env::Default();
  auto layout = BenchLayout(a.layout_opt, a.layout, a.block_bytes_opt, a.block_bytes,
                            uint64_t{4} << 30, "--block-bytes: must be 1..4294967296");
  if (!layout.ok()) return ReportError(flags, layout.status());
  if (a.blocks == 0) return ReportError(flags, Status::InvalidArgument("--blocks: must be > 0"));
  if (a.threads == 0 || a.threads > 256) {
    return ReportError(flags, Status::InvalidArgument("--threads: must be 1..256"));
  }
  Durability durability;
  if (a.durability == "checksum") {
    durability = Durability::kChecksum;
  } else if (a.durability == "fsync") {
    durability = Durability::kFsync;
  } else {
    return ReportError(flags, Status::InvalidArgument("--durability: expected checksum or fsync"));
  }
  const uint64_t est = a.blocks * (layout->BlockBytes() + 4096);
  const uint64_t ram = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (est > ram / 2) {
    return ReportError(
        flags, Status::InvalidArgument("--blocks: the blocks would need " + std::to_string(est) +
                                       " bytes of RAM, more than half of this machine's " +
                                       std::to_string(ram) + " bytes; use fewer --blocks (at most " +
                                       std::to_string(ram / 2 / (layout->BlockBytes() + 4096)) +
                                       " of these)"));
  }
  if (a.drop_caches) {
    Status s = DropCaches();
    if (!s.ok()) return ReportError(flags, s);
  }

  // The blocks: a key chain over pseudo-random tokens, generator content.
  NamespaceOptions ns;
  ns.model_id = "bench-disk";
  ns.layout_signature = layout->Signature();
  ns.block_tokens = layout->block_tokens;
  auto chain = KeyChain::Create(ns);
  if (!chain.ok()) return ReportError(flags, chain.status());
  std::vector<uint32_t> tokens(a.blocks * layout->block_tokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 2654435761u);
  const std::vector<BlockKey> keys = chain->KeysFor(tokens);
  std::vector<SharedBlock> blocks(keys.size());
  Status gen = Parallel(a.threads, keys.size(), [&](size_t i) -> Status {
    const BlockKey& parent = i == 0 ? chain->ns() : keys[i - 1];
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer b,
                            MakeBlockFile(*layout, keys[i], parent, chain->ns(), 1'700'000'000));
    blocks[i] = std::make_shared<const BlockBuffer>(std::move(b));
    return Status::Ok();
  });
  if (!gen.ok()) return ReportError(flags, gen, kExitFailure);
  uint64_t total = 0, max_size = 0;
  for (const auto& b : blocks) {
    total += b->size();
    max_size = std::max<uint64_t>(max_size, b->size());
  }

  const std::string tag = std::to_string(env->ProcessId());
  const std::string raw_dir = JoinPath(a.dir, "bench-raw." + tag);
  const std::string cache_dir = JoinPath(a.dir, "bench-cache." + tag);
  auto cleanup = [&] {
    if (a.keep) return;
    (void)RemoveTree(env, raw_dir);
    (void)RemoveTree(env, cache_dir);
  };
  auto fail = [&](const Status& s) {
    cleanup();
    return ReportError(flags, s, kExitFailure);
  };
  Status mk = env->CreateDirs(a.dir, 0700);
  if (!mk.ok()) return ReportError(flags, mk.WithContext("--dir"));

  DiskTierOptions o;
  o.dir = cache_dir;
  o.layout_signature = layout->Signature();
  o.max_bytes = 0;  // the disk alone bounds it: nothing is evicted
  o.writer_threads = a.threads;
  o.read_threads = a.threads;
  o.durability = durability;
  if (a.read_io == "direct") {
    o.direct_io_reads = true;
    o.direct_io_min_bytes = 0;
  } else if (a.read_io == "buffered") {
    o.direct_io_reads = false;
  } else if (a.read_io != "auto") {
    return ReportError(flags,
                       Status::InvalidArgument("--read-io: expected auto, buffered or direct"));
  }
  if (a.read_api != "load" && a.read_api != "load-buffers") {
    return ReportError(flags, Status::InvalidArgument("--read-api: expected load or load-buffers"));
  }
  if (a.batch_keys == 0) {
    return ReportError(flags, Status::InvalidArgument("--batch-keys: must be > 0"));
  }
  o.commit_batch_bytes = a.commit_batch_bytes;
  // --config's disk_* options (max_bytes stays 0 unless the file sets it).
  Status config =
      a.config.ApplyTo({.disk = &o}, {{"--threads", "disk_writer_threads"},
                                      {"--threads", "disk_read_threads"},
                                      {"--durability", "disk_durability"},
                                      {"--commit-batch-bytes", "disk_commit_batch_bytes"},
                                      {"--read-io", "disk_direct_io_reads"},
                                      {"--read-io", "disk_direct_io_min_bytes"}});
  if (!config.ok()) return ReportError(flags, config);
  o.info_log = StderrLog();
  // The raw side syncs when the tier does.
  const bool fsync = o.durability == Durability::kFsync;

  // Each phase returns its seconds. Writes start from an empty folder.
  auto raw_write = [&]() -> Result<double> {
    (void)RemoveTree(env, raw_dir);
    KVTIER_RETURN_IF_ERROR(MakeRawFolders(env, raw_dir));
    auto t0 = Clock::now();
    KVTIER_RETURN_IF_ERROR(RawWrite(env, raw_dir, keys, blocks, a.threads, fsync));
    KVTIER_RETURN_IF_ERROR(env->SyncFileSystem(raw_dir));
    return Seconds(t0, Clock::now());
  };
  auto our_write = [&]() -> Result<double> {
    (void)RemoveTree(env, cache_dir);
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier, DiskTier::Open(o, env));
    KVTIER_RETURN_IF_ERROR(env->SyncFileSystem(cache_dir));
    auto t0 = Clock::now();
    for (size_t i = 0; i < keys.size(); ++i)
      KVTIER_RETURN_IF_ERROR(tier->Store(keys[i], blocks[i]));
    KVTIER_RETURN_IF_ERROR(tier->Flush());
    KVTIER_RETURN_IF_ERROR(env->SyncFileSystem(cache_dir));
    double secs = Seconds(t0, Clock::now());
    DiskTierStats st = tier->Stats();
    if (st.saves_persisted != keys.size()) {
      return Status::Internal("the tier persisted " + std::to_string(st.saves_persisted) + " of " +
                              std::to_string(keys.size()) + " blocks");
    }
    KVTIER_RETURN_IF_ERROR(tier->Close());
    return secs;
  };
  auto raw_read = [&]() -> Result<double> {
    if (a.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
    auto t0 = Clock::now();
    KVTIER_RETURN_IF_ERROR(RawRead(env, raw_dir, keys, max_size, a.threads));
    return Seconds(t0, Clock::now());
  };
  auto our_read_buffers = [&]() -> Result<double> {
    DiskTierOptions ro = o;
    ro.reconcile_on_open = false;
    ro.read_threads = a.threads - 1;  // the caller reads too: T threads in all
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier, DiskTier::Open(ro, env));
    if (a.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
    // Recycled buffers, as the restore path's pool gives (every bench block
    // has the same size).
    std::mutex mu;
    std::vector<BlockBuffer> free_bufs;
    std::atomic<uint64_t> hits{0};
    std::atomic<bool> failed{false};
    auto alloc = [&](size_t bytes) -> Result<BlockBuffer> {
      {
        std::lock_guard<std::mutex> l(mu);
        if (!free_bufs.empty() && free_bufs.back().size() == bytes) {
          BlockBuffer b = std::move(free_bufs.back());
          free_bufs.pop_back();
          return b;
        }
      }
      return BlockBuffer::Allocate(bytes);
    };
    auto done = [&](size_t, Result<std::optional<BlockBuffer>> r) {
      if (!r.ok() || !r->has_value()) {
        failed.store(true);
        return;
      }
      ++hits;
      std::lock_guard<std::mutex> l(mu);
      free_bufs.push_back(std::move(**r));
    };
    auto t0 = Clock::now();
    for (size_t begin = 0; begin < keys.size(); begin += a.batch_keys) {
      const size_t n = std::min<size_t>(a.batch_keys, keys.size() - begin);
      tier->LoadBuffers(std::span<const BlockKey>(keys).subspan(begin, n), alloc, done);
    }
    double secs = Seconds(t0, Clock::now());
    if (failed.load() || hits.load() != keys.size()) {
      return Status::Internal("only " + std::to_string(hits.load()) + " of " +
                              std::to_string(keys.size()) + " blocks read back");
    }
    KVTIER_RETURN_IF_ERROR(tier->Close());
    return secs;
  };
  auto our_read = [&]() -> Result<double> {
    if (a.read_api == "load-buffers") return our_read_buffers();
    DiskTierOptions ro = o;
    ro.reconcile_on_open = false;  // a reconcile pass would compete with the reads
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier, DiskTier::Open(ro, env));
    if (a.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
    // T threads, each loading its share into its own buffer: the access
    // pattern of the raw side.
    std::vector<BlockBuffer> bufs;
    for (uint32_t t = 0; t < a.threads; ++t) {
      KVTIER_ASSIGN_OR_RETURN(BlockBuffer b, BlockBuffer::Allocate(max_size));
      bufs.push_back(std::move(b));
    }
    std::atomic<uint64_t> hits{0};
    auto t0 = Clock::now();
    KVTIER_RETURN_IF_ERROR(Parallel(a.threads, keys.size(), [&](size_t i) -> Status {
      auto r = tier->Load(keys[i], bufs[i % a.threads].mutable_span());
      if (!r.ok()) return r.status();
      if (r->has_value()) ++hits;
      return Status::Ok();
    }));
    double secs = Seconds(t0, Clock::now());
    if (hits.load() != keys.size()) {
      return Status::Internal("only " + std::to_string(hits.load()) + " of " +
                              std::to_string(keys.size()) + " blocks read back");
    }
    KVTIER_RETURN_IF_ERROR(tier->Close());
    return secs;
  };

  // Rounds alternate which side goes first (the disk's state carries over
  // from one phase to the next); each side's best round counts.
  Figures fig;
  fig.write_s = fig.raw_write_s = fig.read_s = fig.raw_read_s = 1e30;
  auto best = [](double* slot, const Result<double>& r) -> Status {
    if (!r.ok()) return r.status();
    *slot = std::min(*slot, *r);
    return Status::Ok();
  };
  for (uint32_t round = 0; round < a.rounds; ++round) {
    Step(flags.json, "bench disk",
         "round " + std::to_string(round + 1) + "/" + std::to_string(a.rounds) +
             ": write and read " + std::to_string(keys.size()) +
             " blocks, raw and through the tier");
    Status s = Status::Ok();
    if (round % 2 == 0) {
      if (s.ok()) s = best(&fig.raw_write_s, raw_write()).WithContext("raw write");
      if (s.ok()) s = best(&fig.write_s, our_write()).WithContext("write");
      if (s.ok()) s = best(&fig.raw_read_s, raw_read()).WithContext("raw read");
      if (s.ok()) s = best(&fig.read_s, our_read()).WithContext("read");
    } else {
      if (s.ok()) s = best(&fig.write_s, our_write()).WithContext("write");
      if (s.ok()) s = best(&fig.raw_write_s, raw_write()).WithContext("raw write");
      if (s.ok()) s = best(&fig.read_s, our_read()).WithContext("read");
      if (s.ok()) s = best(&fig.raw_read_s, raw_read()).WithContext("raw read");
    }
    if (!s.ok()) return fail(s);
  }

  // Reopen: from Open() to the first hit, reconcile running behind it.
  Step(flags.json, "bench disk", "reopen");
  Status s = Status::Ok();
  if (a.drop_caches && !(s = DropCaches()).ok()) return fail(s);
  {
    auto buf = BlockBuffer::Allocate(max_size);
    if (!buf.ok()) return fail(buf.status());
    auto t0 = Clock::now();
    auto tier = DiskTier::Open(o, env);
    if (!tier.ok()) return fail(tier.status());
    auto r = (*tier)->Load(keys[keys.size() / 2], buf->mutable_span());
    fig.reopen_s = Seconds(t0, Clock::now());
    if (!r.ok() || !r->has_value()) return fail(Status::Internal("reopen: the first load missed"));
    (*tier)->WaitForBackgroundReconcile();
    fig.reconcile_s = Seconds(t0, Clock::now());
    (void)(*tier)->Close();
  }
  cleanup();

  const double gb = static_cast<double>(total) / 1e9;
  const double w = gb / fig.write_s, r = gb / fig.read_s;
  const double rw = gb / fig.raw_write_s, rr = gb / fig.raw_read_s;
  if (flags.json) {
    PrintJson({{"blocks", keys.size()},
               {"block_bytes", blocks[0]->size()},
               {"write_GBps", w},
               {"read_GBps", r},
               {"reopen_s", fig.reopen_s},
               {"reconcile_s", fig.reconcile_s},
               {"raw_write_GBps", rw},
               {"raw_read_GBps", rr},
               {"write_ratio", w / rw},
               {"read_ratio", r / rr},
               {"durability", fsync ? "fsync" : "checksum"},
               {"threads", a.threads},
               {"drop_caches", a.drop_caches},
               {"rounds", a.rounds},
               {"read_io", a.read_io},
               {"read_api", a.read_api},
               {"batch_keys", a.batch_keys},
               {"commit_batch_bytes", o.commit_batch_bytes}});
  } else {
    std::cout << keys.size() << " blocks of " << blocks[0]->size() << " bytes, " << a.threads
              << " threads, durability " << a.durability
              << (a.drop_caches ? ", cold reads\n" : ", reads may hit the page cache\n");
    std::cout << "write  " << w << " GB/s  (raw " << rw << " GB/s, ratio " << w / rw << ")\n";
    std::cout << "read   " << r << " GB/s  (raw " << rr << " GB/s, ratio " << r / rr << ")\n";
    std::cout << "reopen to first hit " << fig.reopen_s << " s; background reconcile done after "
              << fig.reconcile_s << " s\n";
  }
  std::cout.flush();
  return kExitOk;
}

std::function<int()> SetupBenchDisk(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<BenchDiskArgs>();
  app->add_option("--dir", a->dir, "Folder to benchmark in (on the disk to measure)")->required();
  a->config.Add(app);
  a->layout_opt = app->add_option("--layout", a->layout, "Layout preset or .json file");
  a->block_bytes_opt =
      app->add_option("--block-bytes", a->block_bytes, "Blocks of N data bytes instead (3M ok)")
          ->type_name("SIZE");
  app->add_option("--blocks", a->blocks, "Number of blocks")->required();
  app->add_option("--threads", a->threads, "Writer/reader threads on both sides (default 4)");
  app->add_option("--durability", a->durability, "checksum (default) or fsync");
  app->add_flag("--drop-caches", a->drop_caches, "Drop the page cache before reads (root)");
  app->add_flag("--keep", a->keep, "Keep the benchmark folders");
  app->add_option("--read-io", a->read_io,
                  "How the tier reads: auto (its defaults: O_DIRECT from 1 MiB), buffered, "
                  "direct (O_DIRECT at every size); the raw side always reads buffered");
  app->add_option("--read-api", a->read_api,
                  "How the tier is read: load (Load() per key on T threads, default) or "
                  "load-buffers (LoadBuffers() of --batch-keys keys at a time into recycled "
                  "buffers, the restore path's call)");
  app->add_option("--batch-keys", a->batch_keys,
                  "Keys per LoadBuffers() call with --read-api load-buffers (default 64)");
  app->add_option("--commit-batch-bytes", a->commit_batch_bytes,
                  "Bytes a writer commits at once (DiskTierOptions::commit_batch_bytes; "
                  "default 1 MiB, 0 = one block)")
      ->type_name("SIZE");
  app->add_option("--rounds", a->rounds,
                  "Rounds, alternating which side goes first; best of each (default 2)")
      ->check(CLI::Range(1, 100));
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_SUBCOMMAND(bench_disk, "bench", "disk", "Disk tier write/read vs raw files on the same disk",
                  SetupBenchDisk);
}  // namespace kvtier::cli
