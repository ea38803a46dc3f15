#include "token_list.h"

#include <charconv>
#include <cstdint>
#include <string_view>

namespace kvtier::cli {

Result<std::vector<uint32_t>> ParseTokenList(const std::string& text) {
  // Ids are separated by commas and/or whitespace (token files hold one id a
  // line or comma lists). Empty or blank text is zero tokens; a comma with no
  // id before it is an error; one trailing comma is allowed.
  auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  std::vector<uint32_t> out;
  const size_t n = text.size();
  size_t pos = 0;
  bool after_comma = false;
  while (true) {
    while (pos < n && is_space(text[pos])) ++pos;
    if (pos == n) break;
    if (text[pos] == ',') {
      if (out.empty() || after_comma) {
        return Status::InvalidArgument("empty token id at offset " + std::to_string(pos));
      }
      after_comma = true;
      ++pos;
      continue;
    }
    const size_t start = pos;
    while (pos < n && text[pos] != ',' && !is_space(text[pos])) ++pos;
    std::string_view item(text.data() + start, pos - start);
    uint64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v > UINT32_MAX) {
      return Status::InvalidArgument("bad token id '" + std::string(item.substr(0, 40)) +
                                     "' at offset " + std::to_string(start) +
                                     " (expected an integer 0..4294967295)");
    }
    out.push_back(static_cast<uint32_t>(v));
    after_comma = false;
  }
  return out;
}

}  // namespace kvtier::cli
