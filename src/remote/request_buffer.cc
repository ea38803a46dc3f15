#include "remote/request_buffer.h"

#include <hiredis/hiredis.h>

#include <cstdlib>
#include <new>

namespace kvtier::remote {

void RequestBuffer::AppendSmall(std::string_view s) {
  if (s.empty()) return;
  if (!segments_.empty() && segments_.back().external == nullptr &&
      segments_.back().offset + segments_.back().len == small_.size()) {
    segments_.back().len += s.size();
  } else {
    segments_.push_back({nullptr, small_.size(), s.size()});
  }
  small_.append(s);
  bytes_ += s.size();
}

void RequestBuffer::AppendFormatted(int argc, const char** argv, const size_t* lens) {
  char* cmd = nullptr;
  const int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  if (len < 0 || cmd == nullptr) throw std::bad_alloc();  // caught at the tier's boundary
  AppendSmall(std::string_view(cmd, static_cast<size_t>(len)));
  redisFreeCommand(cmd);
}

void RequestBuffer::Command(std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  AppendFormatted(static_cast<int>(argv.size()), argv.data(), lens.data());
}

void RequestBuffer::Command(std::string_view head, std::span<const std::string> rest) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(rest.size() + 1);
  lens.reserve(rest.size() + 1);
  argv.push_back(head.data());
  lens.push_back(head.size());
  for (const std::string& a : rest) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  AppendFormatted(static_cast<int>(argv.size()), argv.data(), lens.data());
}

void RequestBuffer::Set(std::string_view name, std::span<const std::byte> value,
                        uint32_t ttl_seconds) {
  std::string head = ttl_seconds > 0 ? "*5\r\n" : "*3\r\n";
  head += "$3\r\nSET\r\n$";
  head += std::to_string(name.size());
  head += "\r\n";
  head += name;
  head += "\r\n$";
  head += std::to_string(value.size());
  head += "\r\n";
  AppendSmall(head);
  if (!value.empty()) {
    segments_.push_back({value.data(), 0, value.size()});
    bytes_ += value.size();
  }
  std::string tail = "\r\n";
  if (ttl_seconds > 0) {
    const std::string ttl = std::to_string(ttl_seconds);
    tail += "$2\r\nEX\r\n$" + std::to_string(ttl.size()) + "\r\n" + ttl + "\r\n";
  }
  AppendSmall(tail);
}

std::vector<iovec> RequestBuffer::Iovecs() const {
  std::vector<iovec> out;
  out.reserve(segments_.size());
  for (const Segment& s : segments_) {
    const void* base = s.external != nullptr ? static_cast<const void*>(s.external)
                                             : static_cast<const void*>(small_.data() + s.offset);
    out.push_back({const_cast<void*>(base), s.len});
  }
  return out;
}

void RequestBuffer::Clear() {
  small_.clear();
  segments_.clear();
  bytes_ = 0;
}

}  // namespace kvtier::remote
