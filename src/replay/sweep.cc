#include "replay/sweep.h"

#include <algorithm>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>

#include "core/mutex.h"
#include "replay/real_replayer.h"

namespace kvtier::replay {
namespace {

// Requests a point replays between two progress reports.
constexpr uint64_t kProgressChunk = 64;
constexpr uint32_t kMaxSweepThreads = 256;

Status CheckTokens(const std::string& field, uint64_t tokens) {
  if (tokens < kTraceBlockTokens) {
    return Status::InvalidArgument("SweepOptions." + field + " = " + std::to_string(tokens) +
                                   " is less than one 512-token block");
  }
  if (tokens > kMaxReplayTokens) {
    return Status::InvalidArgument("SweepOptions." + field + " = " + std::to_string(tokens) +
                                   " is over the limit of " + std::to_string(kMaxReplayTokens));
  }
  return Status::Ok();
}

// A tier of `blocks` never holds more than the trace's distinct blocks, and
// one that could hold them all never evicts: the same replay, with nothing
// sized by an option larger than the trace.
uint64_t Effective(uint64_t blocks, uint64_t distinct) {
  return std::max<uint64_t>(1, std::min(blocks, distinct));
}

// The tasks of one sweep run by a few worker threads, and the progress they
// report to the thread that called RunSweep.
class SweepRunner {
 public:
  SweepRunner(Env* env, std::span<const TraceRequest> trace, const SweepOptions& options)
      : env_(env), trace_(trace), options_(options), distinct_(DistinctBlocks(trace)) {}

  Result<SweepResult> Run();

 private:
  // Task t < rows_.size() replays row t; the others compute Belady's MIN
  // for one RAM size each.
  Status RunTask(size_t t);
  Status RunSimulated(SweepRow* row);
  Status RunReal(SweepRow* row);
  void WorkerLoop();
  void AddProgress(uint64_t requests);

  Env* const env_;
  const std::span<const TraceRequest> trace_;
  const SweepOptions& options_;
  const uint64_t distinct_;
  // Sized before the workers start; each element is written by the one
  // worker that runs its task and read after they are joined.
  std::vector<SweepRow> rows_;
  std::vector<uint64_t> belady_blocks_;  // distinct RAM sizes, in blocks
  std::vector<uint64_t> belady_tokens_;  // their Belady hit tokens

  Mutex mu_;
  CondVar cv_;  // signalled on progress and when a worker ends
  size_t next_task_ GUARDED_BY(mu_) = 0;
  size_t workers_done_ GUARDED_BY(mu_) = 0;
  uint64_t requests_done_ GUARDED_BY(mu_) = 0;
  Status error_ GUARDED_BY(mu_);
};

Result<SweepResult> SweepRunner::Run() {
  for (HostEvictionPolicy policy : options_.policies) {
    for (uint64_t tokens : options_.ram_tokens) {
      SweepRow row;
      row.policy = policy;
      row.ram_tokens = tokens;
      row.ram_blocks = tokens / kTraceBlockTokens;
      row.disk_tokens = options_.disk_tokens;
      row.disk_blocks = options_.disk_tokens / kTraceBlockTokens;
      rows_.push_back(row);
      if (std::find(belady_blocks_.begin(), belady_blocks_.end(), row.ram_blocks) ==
          belady_blocks_.end()) {
        belady_blocks_.push_back(row.ram_blocks);
      }
    }
  }
  belady_tokens_.assign(belady_blocks_.size(), 0);
  const size_t tasks = rows_.size() + belady_blocks_.size();
  std::vector<std::thread> workers;
  workers.reserve(std::min<size_t>(options_.threads, tasks));
  try {
    while (workers.size() < std::min<size_t>(options_.threads, tasks)) {
      workers.push_back(env_->StartThread([this] { WorkerLoop(); }));
    }
  } catch (const std::system_error&) {
    // Fewer threads than asked (a thread limit): the ones running suffice.
  }
  size_t threads = workers.size();
  if (threads == 0) {
    WorkerLoop();  // on this thread; progress shows at the end
    threads = 1;
  }

  const uint64_t total = tasks * trace_.size();
  uint64_t reported = UINT64_MAX;
  while (true) {
    uint64_t done;
    bool finished;
    {
      MutexLock lock(&mu_);
      while (requests_done_ == reported && workers_done_ != threads) cv_.Wait(&lock);
      done = requests_done_;
      finished = workers_done_ == threads;
    }
    if (done != reported && options_.on_progress) options_.on_progress(done, total);
    reported = done;
    if (finished) break;
  }
  for (std::thread& w : workers) w.join();
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
  }

  SweepResult result;
  result.requests = trace_.size();
  for (const TraceRequest& r : trace_) result.input_tokens += r.input_length;
  result.max_hit_tokens = MaxHitTokens(trace_);
  for (SweepRow& row : rows_) {
    const size_t b = static_cast<size_t>(
        std::find(belady_blocks_.begin(), belady_blocks_.end(), row.ram_blocks) -
        belady_blocks_.begin());
    row.belady_hit_tokens = belady_tokens_[b];
  }
  result.rows = std::move(rows_);
  return result;
}

void SweepRunner::WorkerLoop() {
  const size_t tasks = rows_.size() + belady_blocks_.size();
  while (true) {
    size_t t;
    {
      MutexLock lock(&mu_);
      if (!error_.ok() || next_task_ == tasks) break;
      t = next_task_++;
    }
    Status s;
    try {
      s = RunTask(t);
    } catch (const std::bad_alloc&) {
      s = Status::ResourceExhausted("replay sweep: out of memory");
    } catch (const std::exception& e) {
      s = Status::Internal(std::string("replay sweep: ") + e.what());
    }
    if (!s.ok()) {
      MutexLock lock(&mu_);
      if (error_.ok()) error_ = std::move(s);
    }
  }
  {
    MutexLock lock(&mu_);
    ++workers_done_;
  }
  cv_.SignalAll();
}

void SweepRunner::AddProgress(uint64_t requests) {
  {
    MutexLock lock(&mu_);
    requests_done_ += requests;
  }
  cv_.SignalAll();
}

Status SweepRunner::RunTask(size_t t) {
  if (t >= rows_.size()) {
    const size_t b = t - rows_.size();
    belady_tokens_[b] = BeladyHitTokens(trace_, Effective(belady_blocks_[b], distinct_));
    AddProgress(trace_.size());
    return Status::Ok();
  }
  return options_.real_layout.has_value() ? RunReal(&rows_[t]) : RunSimulated(&rows_[t]);
}

Status SweepRunner::RunSimulated(SweepRow* row) {
  SimOptions so;
  so.ram_blocks = Effective(row->ram_blocks, distinct_);
  so.disk_blocks = row->disk_blocks == 0 ? 0 : Effective(row->disk_blocks, distinct_);
  so.policy = row->policy;
  KVTIER_RETURN_IF_ERROR(so.Validate());
  TierSimulator sim(so);
  for (size_t i = 0; i < trace_.size(); ++i) {
    sim.Replay(trace_[i]);
    if ((i + 1) % kProgressChunk == 0) AddProgress(kProgressChunk);
  }
  AddProgress(trace_.size() % kProgressChunk);
  row->counts = sim.counts();
  return Status::Ok();
}

Status SweepRunner::RunReal(SweepRow* row) {
  RealReplayOptions ro;
  ro.ram_blocks = Effective(row->ram_blocks, distinct_);
  ro.disk_blocks = row->disk_blocks == 0 ? 0 : Effective(row->disk_blocks, distinct_);
  ro.policy = row->policy;
  ro.layout = *options_.real_layout;
  if (ro.disk_blocks > 0) {
    ro.disk_dir = options_.disk_dir + "/" + std::string(HostEvictionPolicyName(row->policy)) + "-" +
                  std::to_string(row->ram_tokens);
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RealReplayer> rr, RealReplayer::Create(env_, ro));
  for (size_t i = 0; i < trace_.size(); ++i) {
    Status s = rr->Replay(trace_[i]);
    if (!s.ok()) return s.WithContext("request " + std::to_string(i + 1));
    if ((i + 1) % kProgressChunk == 0) AddProgress(kProgressChunk);
  }
  AddProgress(trace_.size() % kProgressChunk);
  KVTIER_RETURN_IF_ERROR(rr->Finish());
  row->counts = rr->stats().counts;
  row->verified = rr->stats().verified;
  row->wrong = rr->stats().wrong;
  return Status::Ok();
}

// The parent of the real replays' disk folders: created empty here.
Status PrepareDiskParent(Env* env, const std::string& dir) {
  Result<FileInfo> info = env->Stat(dir);
  if (info.ok()) {
    if (info->type != FileType::kDirectory) {
      return Status::InvalidArgument("disk folder " + dir + " is not a folder");
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(dir));
    if (!names.empty()) {
      return Status::InvalidArgument("disk folder " + dir +
                                     " is not empty (a replay needs a fresh folder: blocks of an "
                                     "earlier run would count as hits)");
    }
    return Status::Ok();
  }
  if (!info.status().IsNotFound()) return info.status();
  return env->CreateDir(dir, 0755);
}

}  // namespace

Status SweepOptions::Validate() const {
  if (ram_tokens.empty() || ram_tokens.size() > kMaxSweepPoints) {
    return Status::InvalidArgument("SweepOptions.ram_tokens must have 1.." +
                                   std::to_string(kMaxSweepPoints) + " entries, has " +
                                   std::to_string(ram_tokens.size()));
  }
  for (size_t i = 0; i < ram_tokens.size(); ++i) {
    KVTIER_RETURN_IF_ERROR(CheckTokens("ram_tokens[" + std::to_string(i) + "]", ram_tokens[i]));
    if (std::find(ram_tokens.begin(), ram_tokens.begin() + i, ram_tokens[i]) !=
        ram_tokens.begin() + i) {
      return Status::InvalidArgument("SweepOptions.ram_tokens repeats " +
                                     std::to_string(ram_tokens[i]));
    }
  }
  if (disk_tokens != 0) KVTIER_RETURN_IF_ERROR(CheckTokens("disk_tokens", disk_tokens));
  if (policies.empty()) return Status::InvalidArgument("SweepOptions.policies is empty");
  for (size_t i = 0; i < policies.size(); ++i) {
    if (policies[i] != HostEvictionPolicy::kLru && policies[i] != HostEvictionPolicy::kReuse) {
      return Status::InvalidArgument("SweepOptions.policies holds an unknown policy");
    }
    if (std::find(policies.begin(), policies.begin() + i, policies[i]) != policies.begin() + i) {
      return Status::InvalidArgument("SweepOptions.policies repeats " +
                                     std::string(HostEvictionPolicyName(policies[i])));
    }
  }
  if (threads == 0 || threads > kMaxSweepThreads) {
    return Status::InvalidArgument("SweepOptions.threads must be 1.." +
                                   std::to_string(kMaxSweepThreads));
  }
  const bool real_disk = real_layout.has_value() && disk_tokens != 0;
  if (real_disk && disk_dir.empty()) {
    return Status::InvalidArgument(
        "SweepOptions.disk_dir is required for a real-payload sweep with a disk tier");
  }
  if (!real_disk && !disk_dir.empty()) {
    return Status::InvalidArgument(
        "SweepOptions.disk_dir is only used by a real-payload sweep with a disk tier");
  }
  if (real_layout.has_value()) {
    Status s = real_layout->Validate();
    if (!s.ok()) return s.WithContext("SweepOptions.real_layout");
  }
  return Status::Ok();
}

double SweepResult::MaxHitRatio() const {
  return input_tokens == 0
             ? 0.0
             : static_cast<double>(max_hit_tokens) / static_cast<double>(input_tokens);
}

uint64_t DistinctBlocks(std::span<const TraceRequest> trace) {
  std::unordered_set<uint64_t> ids;
  for (const TraceRequest& r : trace) ids.insert(r.hash_ids.begin(), r.hash_ids.end());
  return ids.size();
}

Result<SweepResult> RunSweep(Env* env, std::span<const TraceRequest> trace,
                             const SweepOptions& options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  try {
    if (!options.disk_dir.empty()) KVTIER_RETURN_IF_ERROR(PrepareDiskParent(env, options.disk_dir));
    SweepRunner runner(env, trace, options);
    return runner.Run();
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("replay sweep: out of memory");
  }
}

}  // namespace kvtier::replay
