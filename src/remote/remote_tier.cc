// RemoteTierImpl: composes the parts of the remote tier (router, batch
// runner, reader, writer, write queue and writer threads) behind the
// RemoteTier interface, and keeps exceptions (bad_alloc) from crossing it.
#include "kvtier/remote_tier.h"

#include <atomic>
#include <functional>
#include <limits>
#include <new>
#include <thread>

#include "kvtier/redis_url.h"
#include "remote/batch_runner.h"
#include "remote/block_reader.h"
#include "remote/block_writer.h"
#include "remote/counters.h"
#include "remote/layout_scan.h"
#include "remote/node_table.h"
#include "remote/router.h"
#include "remote/tls.h"
#include "remote/value_layout.h"
#include "remote/value_mac.h"
#include "remote/verify_pool.h"
#include "remote/write_queue.h"

namespace kvtier {
namespace {

using remote::RemoteCounters;
using C = RemoteCounters;

// What a writer takes from the queue at once: one probe round trip (GETRANGE + EXISTS) for the
// batch, then its SETs through the pipeline window.
constexpr size_t kWriterBatchBlocks = 64;
constexpr uint64_t kWriterBatchBytes = uint64_t{64} << 20;

class RemoteTierImpl final : public RemoteTier {
 public:
  RemoteTierImpl(const RemoteTierOptions& options, remote::RedisUrl url,
                 std::unique_ptr<const remote::ValueMac> mac,
                 std::shared_ptr<const remote::TlsContext> tls, Env* env)
      : options_(options),
        url_(std::move(url)),
        tls_(std::move(tls)),
        env_(env),
        values_(options.key_prefix, options.part_bytes, options.layout.BlockBytes()),
        mac_(std::move(mac)),
        // Only a signed reader has hashing to hand off.
        verify_pool_(mac_ != nullptr ? std::make_unique<remote::VerifyPool>(
                                           remote::VerifyPool::DefaultThreads(), env)
                                     : nullptr),
        table_([this](const remote::NodeAddress& a) { return MakeNode(a); }),
        router_(MakeRouterOptions(), &table_, env, &counters_),
        runner_(MakeRunnerOptions(), &router_, env, &counters_),
        reader_(&values_, &options_.layout, mac_.get(), uint64_t{options.lookup_budget_ms} * 1000,
                &runner_, env, &counters_, verify_pool_.get()),
        writer_({options.ttl_seconds, options.skip_existing}, &values_, mac_.get(), &runner_, env,
                &counters_),
        queue_(options.queue_max_bytes, env) {
    counters_.events.Attach(options_.info_log, env_, options_.breaker_failure_threshold);
  }

  ~RemoteTierImpl() override { (void)Close(); }

  // Connects once (and loads the Cluster's slot map), then starts the
  // writers.
  Status Start();

  std::vector<bool> Exists(std::span<const BlockKey> keys) override;
  SharedBlock Get(const BlockKey& key) override;
  std::vector<SharedBlock> GetMany(std::span<const BlockKey> keys) override;
  void LoadBuffers(std::span<const BlockKey> keys, const BufferAllocator& alloc,
                   const LoadedBufferCallback& done) override;
  void LoadTensorBuffers(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                         const BufferAllocator& alloc, const LoadedBufferCallback& done) override;
  Result<std::optional<size_t>> GetInto(const BlockKey& key, std::span<std::byte> dst) override;
  Status Put(const BlockKey& key, SharedBlock block) override;
  Status PutSync(const BlockKey& key, std::span<const std::byte> block) override;
  Result<bool> Erase(const BlockKey& key) override;
  Result<uint64_t> EraseLayout() override;
  Status Flush() override;
  RemoteTierStats Stats() override;
  Status Close() override;

 private:
  using ValueCallback = std::function<void(size_t, Result<std::optional<BlockBuffer>>)>;
  // LoadBuffers() and LoadTensorBuffers() around `read` (the reader's call
  // with the callback it is given): a closed tier's misses, one callback
  // per key also when memory runs out, the latency.
  void RunLoad(std::span<const BlockKey> keys, const LoadedBufferCallback& done,
               const std::function<void(const ValueCallback&)>& read);
  std::shared_ptr<remote::Node> MakeNode(const remote::NodeAddress& a);
  remote::RouterOptions MakeRouterOptions() const;
  remote::RunnerOptions MakeRunnerOptions() const;
  Status CheckBlock(const BlockKey& key, std::span<const std::byte> block) const;
  void WriterLoop();

  const RemoteTierOptions options_;
  const remote::RedisUrl url_;
  const std::shared_ptr<const remote::TlsContext> tls_;  // null: plaintext
  Env* const env_;
  RemoteCounters counters_;  // and its events, where the nodes' breakers report
  const remote::ValueLayout values_;
  const std::unique_ptr<const remote::ValueMac> mac_;  // null: values unsigned
  const std::unique_ptr<remote::VerifyPool> verify_pool_;  // with mac_: hashes reads
  remote::NodeTable table_;
  remote::Router router_;
  remote::BatchRunner runner_;
  remote::BlockReader reader_;
  remote::BlockWriter writer_;
  remote::WriteQueue queue_;
  std::vector<std::thread> writers_;  // started in Start(), joined in Close()
  std::atomic<bool> closed_{false};
};

std::shared_ptr<remote::Node> RemoteTierImpl::MakeNode(const remote::NodeAddress& a) {
  remote::ConnectionParams p;
  p.address = a;
  p.user = url_.user;
  p.password = url_.password;
  p.has_password = url_.has_password;
  p.db = url_.db;
  p.connect_timeout_ms = options_.connect_timeout_ms;
  p.tls = tls_;
  remote::BreakerOptions b;
  b.failure_threshold = options_.breaker_failure_threshold;
  b.open_micros = uint64_t{options_.breaker_open_ms} * 1000;
  b.max_open_micros = uint64_t{options_.breaker_max_open_ms} * 1000;
  b.on_change = [this, name = a.ToString()](remote::BreakerChange change, uint64_t open_micros,
                                            std::string_view cause) {
    counters_.events.BreakerChanged(name, change, open_micros, cause);
    // A Cluster node gone down: the slot map may name a master that a
    // failover is replacing; the router reloads it off the request path.
    if (change != remote::BreakerChange::kClosed) router_.MarkStale();
  };
  return std::make_shared<remote::Node>(std::move(p), options_.connections_per_node, b, env_,
                                        &counters_);
}

remote::RouterOptions RemoteTierImpl::MakeRouterOptions() const {
  remote::RouterOptions r;
  r.mode = url_.mode;
  r.seeds = url_.nodes;
  r.tls = url_.tls;
  r.command_timeout_micros = uint64_t{options_.command_timeout_ms} * 1000;
  r.connect_timeout_micros = uint64_t{options_.connect_timeout_ms} * 1000;
  r.failed_refresh_backoff_micros = uint64_t{options_.breaker_open_ms} * 1000;
  return r;
}

remote::RunnerOptions RemoteTierImpl::MakeRunnerOptions() const {
  remote::RunnerOptions r;
  r.connect_timeout_micros = uint64_t{options_.connect_timeout_ms} * 1000;
  r.command_timeout_micros = uint64_t{options_.command_timeout_ms} * 1000;
  r.pipeline_max_bytes = options_.pipeline_max_bytes;
  r.min_reply_rate = options_.min_reply_rate;
  return r;
}

Status RemoteTierImpl::Start() {
  Status s;
  if (url_.mode == remote::RedisMode::kSingle) {
    std::shared_ptr<remote::Node> node = router_.Route(0);
    Result<std::unique_ptr<remote::Connection>> c =
        node->pool.Acquire(env_->NowMicros() + uint64_t{options_.connect_timeout_ms} * 1000 +
                           uint64_t{options_.command_timeout_ms} * 1000);
    if (c.ok()) {
      node->pool.Release(std::move(c).value());
    } else {
      s = c.status();
    }
  } else {
    s = router_.Refresh();
  }
  if (!s.ok()) {
    if (s.IsInvalidArgument()) return s;  // refused credentials, or not a cluster: say so now
    if (options_.require_server_at_open) {
      return Status::Unavailable("remote " + url_.Redacted() + ": " + s.message());
    }
    // Start with the breakers open: calls miss at once until a probe finds
    // the server.
    for (const std::shared_ptr<remote::Node>& n : table_.All()) {
      if (n->breaker.Trip(env_->NowMicros(), s.message())) C::Add(counters_.breaker_opens);
    }
  }
  for (uint32_t i = 0; i < options_.writer_threads; ++i) {
    writers_.push_back(env_->StartThread([this] { WriterLoop(); }));
  }
  router_.StartRefresher();
  return Status::Ok();
}

void RemoteTierImpl::WriterLoop() {
  while (true) {
    std::vector<remote::QueuedBlock> batch = queue_.PopBatch(kWriterBatchBlocks, kWriterBatchBytes);
    if (batch.empty()) return;
    try {
      writer_.WriteBatch(batch);
    } catch (const std::bad_alloc&) {
      C::Add(counters_.drops_error, batch.size());
    }
    queue_.Done(batch);
  }
}

std::vector<bool> RemoteTierImpl::Exists(std::span<const BlockKey> keys) {
  const uint64_t start = env_->NowMicros();
  std::vector<bool> found;
  if (closed_.load()) return std::vector<bool>(keys.size(), false);
  try {
    found = reader_.Exists(keys);
  } catch (const std::bad_alloc&) {
    found.assign(keys.size(), false);
  }
  counters_.exists_latency.Record(env_->NowMicros() - start);
  return found;
}

SharedBlock RemoteTierImpl::Get(const BlockKey& key) {
  std::vector<SharedBlock> r = GetMany(std::span(&key, 1));
  return r.empty() ? nullptr : std::move(r[0]);
}

std::vector<SharedBlock> RemoteTierImpl::GetMany(std::span<const BlockKey> keys) {
  const uint64_t start = env_->NowMicros();
  std::vector<SharedBlock> out;
  if (closed_.load()) {
    C::Add(counters_.lookups, keys.size());
    C::Add(counters_.misses, keys.size());
    return std::vector<SharedBlock>(keys.size());
  }
  try {
    out = reader_.GetMany(keys);
  } catch (const std::bad_alloc&) {
    out.assign(keys.size(), nullptr);
  }
  counters_.get_latency.Record(env_->NowMicros() - start);
  return out;
}

void RemoteTierImpl::LoadBuffers(std::span<const BlockKey> keys, const BufferAllocator& alloc,
                                 const LoadedBufferCallback& done) {
  const remote::ValueAllocator* a = alloc ? &alloc : nullptr;
  RunLoad(keys, done, [&](const ValueCallback& each) { reader_.LoadBuffers(keys, a, each); });
}

void RemoteTierImpl::LoadTensorBuffers(std::span<const BlockKey> keys,
                                       std::span<const TensorMask> masks,
                                       const BufferAllocator& alloc,
                                       const LoadedBufferCallback& done) {
  const remote::ValueAllocator* a = alloc ? &alloc : nullptr;
  RunLoad(keys, done,
          [&](const ValueCallback& each) { reader_.LoadTensorBuffers(keys, masks, a, each); });
}

void RemoteTierImpl::RunLoad(std::span<const BlockKey> keys, const LoadedBufferCallback& done,
                             const std::function<void(const ValueCallback&)>& read) {
  const uint64_t start = env_->NowMicros();
  if (closed_.load()) {
    C::Add(counters_.lookups, keys.size());
    C::Add(counters_.misses, keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      done(i, Status::FailedPrecondition("remote tier closed"));
    }
    return;
  }
  std::vector<bool> answered(keys.size(), false);
  try {
    read([&](size_t i, Result<std::optional<BlockBuffer>> r) {
      answered[i] = true;
      done(i, std::move(r));
    });
  } catch (const std::bad_alloc&) {
    // Every key still gets its one callback.
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!answered[i]) done(i, Status::ResourceExhausted("remote: out of memory"));
    }
  }
  counters_.get_latency.Record(env_->NowMicros() - start);
}

Result<std::optional<size_t>> RemoteTierImpl::GetInto(const BlockKey& key,
                                                      std::span<std::byte> dst) {
  const uint64_t start = env_->NowMicros();
  if (closed_.load()) {
    C::Add(counters_.lookups);
    C::Add(counters_.misses);
    return std::optional<size_t>();
  }
  Result<std::optional<size_t>> r = std::optional<size_t>();
  try {
    r = reader_.GetInto(key, dst);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("remote: out of memory reading " + key.Hex());
  }
  counters_.get_latency.Record(env_->NowMicros() - start);
  return r;
}

Status RemoteTierImpl::CheckBlock(const BlockKey& key, std::span<const std::byte> block) const {
  if (block.size() > values_.max_value_bytes()) {
    return Status::InvalidArgument("remote: block of " + std::to_string(block.size()) +
                                   " bytes is larger than the layout allows");
  }
  if (!options_.verify_puts) return Status::Ok();
  const std::string signature = options_.layout.Signature();
  DecodeOptions o;
  o.expected_key = &key;
  o.expected_signature = &signature;
  o.expected_layout = &options_.layout;
  Result<DecodedBlock> d = DecodeBlockHeader(block, block.size(), o);
  if (!d.ok())
    return Status::InvalidArgument("remote: refusing block " + key.Hex() + ": " +
                                   d.status().message());
  return Status::Ok();
}

Status RemoteTierImpl::Put(const BlockKey& key, SharedBlock block) {
  if (closed_.load()) return Status::FailedPrecondition("remote tier closed");
  if (block == nullptr) return Status::InvalidArgument("remote: Put of a null block");
  try {
    KVTIER_RETURN_IF_ERROR(CheckBlock(key, block->span()));
    std::shared_ptr<remote::Node> node = router_.Peek(remote::ValueLayout::SlotOf(key));
    if (node && node->breaker.IsOpen(env_->NowMicros())) {
      C::Add(counters_.drops_unavailable);
      return Status::Unavailable("remote: " + node->address.ToString() +
                                 " is down (breaker open); copy dropped");
    }
    switch (queue_.Push(key, std::move(block))) {
      case remote::WriteQueue::PushResult::kQueued:
        C::Add(counters_.puts);
        return Status::Ok();
      case remote::WriteQueue::PushResult::kDuplicate:
        C::Add(counters_.puts_deduplicated);
        return Status::Ok();
      case remote::WriteQueue::PushResult::kFull:
        C::Add(counters_.drops_queue_full);
        counters_.events.QueueFull(options_.queue_max_bytes);
        return Status::ResourceExhausted("remote: write queue full; copy dropped");
      case remote::WriteQueue::PushResult::kClosed:
        break;
    }
    return Status::FailedPrecondition("remote tier closed");
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("remote: out of memory queueing " + key.Hex());
  }
}

Status RemoteTierImpl::PutSync(const BlockKey& key, std::span<const std::byte> block) {
  if (closed_.load()) return Status::FailedPrecondition("remote tier closed");
  try {
    KVTIER_RETURN_IF_ERROR(CheckBlock(key, block));
    return writer_.WriteOne(key, block);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("remote: out of memory writing " + key.Hex());
  }
}

Result<bool> RemoteTierImpl::Erase(const BlockKey& key) {
  if (closed_.load()) return Status::FailedPrecondition("remote tier closed");
  try {
    return reader_.Erase(key);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("remote: out of memory erasing " + key.Hex());
  }
}

Result<uint64_t> RemoteTierImpl::EraseLayout() {
  if (closed_.load()) return Status::FailedPrecondition("remote tier closed");
  remote::LayoutScanOptions o;
  o.command_timeout_micros = uint64_t{options_.command_timeout_ms} * 1000;
  o.connect_timeout_micros = uint64_t{options_.connect_timeout_ms} * 1000;
  remote::LayoutScan scan(o, &values_, options_.layout.Signature(), &router_, &runner_, env_,
                          &counters_);
  try {
    return scan.EraseLayout();
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("remote: out of memory listing this layout's blocks");
  }
}

Status RemoteTierImpl::Flush() {
  queue_.WaitFor(queue_.NextSeq(), 0);
  return Status::Ok();
}

RemoteTierStats RemoteTierImpl::Stats() {
  RemoteTierStats s;
  counters_.CopyTo(&s);
  s.queue_bytes = queue_.bytes();
  s.queue_blocks = queue_.blocks();
  const uint64_t now = env_->NowMicros();
  for (const std::shared_ptr<remote::Node>& n : table_.All()) {
    ++s.nodes;
    if (n->breaker.IsOpen(now)) ++s.nodes_down;
    s.connections += n->pool.open_connections();
  }
  return s;
}

Status RemoteTierImpl::Close() {
  if (closed_.exchange(true)) return Status::Ok();
  queue_.Close();
  // A timeout too large to express in microseconds never elapses: no bound
  // (ms * 1000 would wrap to a short wait and drop the queue).
  constexpr uint64_t kMaxMs = std::numeric_limits<uint64_t>::max() / 1000;
  const uint64_t timeout =
      options_.close_timeout_ms > kMaxMs ? 0 : options_.close_timeout_ms * 1000;
  const bool drained = queue_.WaitFor(queue_.NextSeq(), timeout);
  uint64_t dropped = 0;
  if (!drained) {
    dropped = queue_.Abort().size();
    C::Add(counters_.drops_closed, dropped);
  }
  for (std::thread& t : writers_) t.join();
  writers_.clear();
  router_.StopRefresher();  // a reload in progress ends within its bound
  for (const std::shared_ptr<remote::Node>& n : table_.All()) n->pool.Close();
  // A read still running does its own hashing from here on.
  if (verify_pool_) verify_pool_->Close();
  if (dropped > 0) {
    return Status::Unavailable("remote: Close() dropped " + std::to_string(dropped) +
                               " queued blocks after " + std::to_string(options_.close_timeout_ms) +
                               " ms");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<RemoteTier>> RemoteTier::Open(const RemoteTierOptions& options, Env* env) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  try {
    KVTIER_ASSIGN_OR_RETURN(remote::RedisUrl url, remote::ParseRedisUrl(options.url));
    std::unique_ptr<const remote::ValueMac> mac;
    if (!options.mac_keys.empty()) {
      KVTIER_ASSIGN_OR_RETURN(mac, remote::ValueMac::Load(options.mac_keys, env));
    }
    std::shared_ptr<const remote::TlsContext> tls;
    if (url.tls) {
      KVTIER_ASSIGN_OR_RETURN(
          tls, remote::TlsContext::Create({options.tls_ca_file, options.tls_cert_file,
                                           options.tls_key_file, options.tls_server_name},
                                          env));
    }
    auto tier = std::make_unique<RemoteTierImpl>(options, std::move(url), std::move(mac),
                                                 std::move(tls), env);
    KVTIER_RETURN_IF_ERROR(tier->Start());
    return std::unique_ptr<RemoteTier>(std::move(tier));
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("remote: out of memory opening the tier");
  }
}

}  // namespace kvtier
