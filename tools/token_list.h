// Token ids as `kvtier key` and `kvtier synth` take them (--tokens, token
// files): decimal ids separated by commas and/or whitespace.
//
// Thread safety: a pure function.
#ifndef KVTIER_TOOLS_TOKEN_LIST_H_
#define KVTIER_TOOLS_TOKEN_LIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::cli {

// Parses "1,2,3" into token ids; InvalidArgument names the bad item.
Result<std::vector<uint32_t>> ParseTokenList(const std::string& text);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_TOKEN_LIST_H_
