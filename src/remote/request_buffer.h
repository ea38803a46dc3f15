// RequestBuffer: a batch of RESP commands to pipeline on one connection,
// sent with one writev-style call.
//
// Small commands (GET, EXISTS, MGET, DEL, AUTH, ...) are formatted by
// hiredis (redisFormatCommandArgv) into one contiguous buffer. A SET's
// value is not copied: Set() formats only the command's header and
// trailer and references the caller's bytes, so a 32 MiB block goes from
// its BlockBuffer to the socket without passing through any command
// buffer. The referenced bytes must outlive the send.
//
// Thread safety: a value used by one thread.
#ifndef KVTIER_REMOTE_REQUEST_BUFFER_H_
#define KVTIER_REMOTE_REQUEST_BUFFER_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::remote {

class RequestBuffer {
 public:
  // Appends one command with these arguments.
  void Command(std::initializer_list<std::string_view> args);
  // Appends `head` followed by `rest` as one command (e.g. EXISTS + names).
  void Command(std::string_view head, std::span<const std::string> rest);
  // Appends SET name <value> [EX ttl_seconds] (no EX when ttl_seconds is 0).
  void Set(std::string_view name, std::span<const std::byte> value, uint32_t ttl_seconds);

  // The bytes to send, in order. Valid until the next append or Clear().
  std::vector<iovec> Iovecs() const;
  uint64_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  void Clear();

 private:
  void AppendFormatted(int argc, const char** argv, const size_t* lens);
  void AppendSmall(std::string_view s);

  struct Segment {
    const std::byte* external = nullptr;  // nullptr: [offset, offset + len) of small_
    size_t offset = 0;
    size_t len = 0;
  };
  std::string small_;
  std::vector<Segment> segments_;
  uint64_t bytes_ = 0;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_REQUEST_BUFFER_H_
