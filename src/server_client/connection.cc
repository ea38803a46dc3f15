#include "server_client/connection.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace kvtier::server {

Status ReadReplyHead(FrameReader* r, Op op) {
  KVTIER_ASSIGN_OR_RETURN(Op got, r->Header());
  if (got != op) return Status::Corruption("reply to another op");
  Status s = r->StatusOf();
  if (!r->ok()) return Status::Corruption("truncated reply");
  return s;
}

namespace {

// Every Connection of the process, for the fork handler. Never destroyed
// (a Connection may outlive static destruction).
Mutex* LiveMu() {
  static Mutex* mu = new Mutex();
  return mu;
}
std::vector<Connection*>* Live() {
  static auto* live = new std::vector<Connection*>();
  return live;
}

// pthread_atfork handlers: the list is locked across fork() so that the
// child's copy is whole, and unlocked on both sides after it.
void LockLiveBeforeFork() NO_THREAD_SAFETY_ANALYSIS { LiveMu()->Lock(); }
void UnlockLiveInParent() NO_THREAD_SAFETY_ANALYSIS { LiveMu()->Unlock(); }
void AbandonLiveInChild() NO_THREAD_SAFETY_ANALYSIS {
  for (Connection* c : *Live()) c->AbandonAfterFork();
  LiveMu()->Unlock();
}

void Register(Connection* c) {
  static const int registered = ::pthread_atfork(&LockLiveBeforeFork, &UnlockLiveInParent,
                                                 &AbandonLiveInChild);
  (void)registered;
  MutexLock lock(LiveMu());
  Live()->push_back(c);
}

void Unregister(Connection* c) {
  MutexLock lock(LiveMu());
  std::erase(*Live(), c);
}

}  // namespace

Connection::Connection(ServerClientOptions options, std::string socket_path)
    : options_(std::move(options)),
      path_(std::move(socket_path)),
      signature_(options_.layout_signature) {
  Register(this);
}

Connection::~Connection() {
  Unregister(this);  // first, and not under mu_: the fork handler takes the list, then no mu_
  MutexLock lock(&mu_);
  SendTouches();
  DisconnectLocked();
}

void Connection::AbandonAfterFork() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (arena_ != nullptr) arena_->AbandonAfterFork();
}

void Connection::DisconnectLocked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  arena_.reset();
  touches_.clear();  // of that arena's slots
}

void Connection::QueueTouch(uint32_t slot, uint64_t generation) {
  if (fd_ < 0) return;
  if (touches_.empty()) first_touch_us_ = MonotonicMicros();
  touches_.emplace_back(slot, generation);
}

void Connection::FlushTouchesIfDue() {
  if (touches_.empty()) return;
  if (touches_.size() >= kTouchBatch || MonotonicMicros() - first_touch_us_ >= kTouchDelayUs) {
    SendTouches();
  }
}

void Connection::SendTouches() {
  if (fd_ < 0 || touches_.empty()) return;
  FrameWriter touch(Op::kTouch);
  touch.U32(static_cast<uint32_t>(touches_.size()));
  for (const auto& [slot, generation] : touches_) {
    touch.U32(slot);
    touch.U64(generation);
  }
  touches_.clear();
  Post(&touch);
}

Status Connection::ConnectNow() {
  if (fd_ >= 0) return Status::Ok();
  if (Status s = ConnectLocked(); !s.ok()) {
    DisconnectLocked();
    ++counters.unavailable;
    if (s.code() == StatusCode::kInvalidArgument) return s;  // the daemon refused us
    return Status::Unavailable(s.message());
  }
  const uint64_t deadline = MonotonicMicros() + kWarmBudgetUs;
  counters.warmed_pages += arena_->WarmPublished([&] { return MonotonicMicros() >= deadline; });
  return Status::Ok();
}

void Connection::Drop() {
  DisconnectLocked();
  retry_after_us_ = MonotonicMicros() + options_.reconnect_backoff_ms * 1000;
}

Arena* Connection::LiveArena() {
  if (fd_ < 0) return nullptr;
  if (!Arena::OwnerAlive(owner_, arena_->OwnerWord())) {
    Drop();
    ++counters.unavailable;
    return nullptr;
  }
  return arena_.get();
}

Status Connection::ConnectLocked() {
  const uint64_t deadline = MonotonicMicros() + options_.timeout_ms * 1000;
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) return Status::IOError("socket", errno);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path_.data(), path_.size());
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    return Status::Unavailable("kvtier serve at " + path_ + ": " + std::strerror(errno));
  }
  FrameWriter hello(Op::kHello);
  hello.Str16(signature_);
  KVTIER_RETURN_IF_ERROR(SendFrame(fd_, hello.Finish(), deadline));
  std::vector<uint8_t> body;
  int arena_fd = -1;
  KVTIER_RETURN_IF_ERROR(RecvFrame(fd_, &body, deadline, &arena_fd));
  FrameReader r(body);
  Status s = ReadReplyHead(&r, Op::kHello);
  if (!s.ok()) {
    if (arena_fd >= 0) ::close(arena_fd);
    return s;
  }
  r.U32();  // slot count, slot bytes, arena bytes: the arena's own header says
  r.U64();
  r.U64();
  if (!r.Done("hello").ok() || arena_fd < 0) {
    if (arena_fd >= 0) ::close(arena_fd);
    return Status::Corruption("hello reply without an arena");
  }
  KVTIER_ASSIGN_OR_RETURN(arena_, Arena::Map(arena_fd));
  owner_ = arena_->OwnerWord();
  if (!Arena::OwnerAlive(owner_, owner_)) {
    return Status::Unavailable("kvtier serve at " + path_ + ": its arena has no serving daemon");
  }
  ++counters.connects;
  return Status::Ok();
}

Result<std::vector<uint8_t>> Connection::Call(FrameWriter* request) {
  SendTouches();  // taken before this request (a failed send: down, below)
  const uint64_t now = MonotonicMicros();
  if (fd_ < 0) {
    if (now < retry_after_us_) {
      ++counters.unavailable;
      return Status::Unavailable("kvtier serve at " + path_ + " is down (retrying later)");
    }
    Status s = ConnectLocked();
    if (!s.ok()) {
      DisconnectLocked();
      retry_after_us_ = MonotonicMicros() + options_.reconnect_backoff_ms * 1000;
      ++counters.unavailable;
      // A refusal (wrong layout) is the daemon's answer, not an outage.
      if (s.code() == StatusCode::kInvalidArgument) return s;
      return Status::Unavailable(s.message());
    }
  }
  const uint64_t deadline = MonotonicMicros() + options_.timeout_ms * 1000;
  std::vector<uint8_t> body;
  Status s = SendFrame(fd_, request->Finish(), deadline);
  if (s.ok()) s = RecvFrame(fd_, &body, deadline);
  ++counters.requests;
  if (!s.ok()) {
    DisconnectLocked();
    retry_after_us_ = MonotonicMicros() + options_.reconnect_backoff_ms * 1000;
    ++counters.unavailable;
    return Status::Unavailable(s.message());
  }
  return body;
}

void Connection::Post(FrameWriter* request) {
  if (fd_ < 0) return;
  if (!SendFrame(fd_, request->Finish(), MonotonicMicros() + options_.timeout_ms * 1000).ok()) {
    Drop();
    ++counters.unavailable;
  }
}

}  // namespace kvtier::server
