// MemorySource: a ReplySource over bytes in memory, for parser tests. It
// behaves like a connection whose server sent exactly these bytes and then
// closed: reading past the end is an IOError.
#ifndef KVTIER_REMOTE_MEMORY_SOURCE_TEST_UTIL_H_
#define KVTIER_REMOTE_MEMORY_SOURCE_TEST_UTIL_H_

#include <cstring>
#include <string>

#include "remote/resp_reader.h"

namespace kvtier::remote {

class MemorySource : public ReplySource {
 public:
  explicit MemorySource(std::string bytes) : bytes_(std::move(bytes)) {}

  Result<std::string_view> ReadLine(size_t max_bytes) override {
    const size_t nl = bytes_.find('\n', pos_);
    if (nl == std::string::npos) {
      if (bytes_.size() - pos_ > max_bytes) return Status::Corruption("protocol error: long line");
      return Status::IOError("closed", 0);
    }
    if (nl - pos_ > max_bytes + 1) return Status::Corruption("protocol error: long line");
    if (nl == pos_ || bytes_[nl - 1] != '\r') return Status::Corruption("protocol error: no CR");
    std::string_view line(bytes_.data() + pos_, nl - 1 - pos_);
    if (line.find('\r') != std::string_view::npos) return Status::Corruption("protocol error: CR");
    pos_ = nl + 1;
    return line;
  }
  Status ReadExact(std::span<std::byte> dst) override {
    if (bytes_.size() - pos_ < dst.size()) return Status::IOError("closed", 0);
    std::memcpy(dst.data(), bytes_.data() + pos_, dst.size());
    pos_ += dst.size();
    return Status::Ok();
  }
  Status Skip(uint64_t n) override {
    if (bytes_.size() - pos_ < n) return Status::IOError("closed", 0);
    pos_ += n;
    return Status::Ok();
  }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::string bytes_;
  size_t pos_ = 0;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_MEMORY_SOURCE_TEST_UTIL_H_
