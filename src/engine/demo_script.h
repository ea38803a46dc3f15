// The scripted session `kvtier demo` serves: a long shared system prompt and
// user messages for several multi-turn conversations. Tokens are bytes
// (token id = byte value, vocabulary 256), so prompts print as text.
//
// Thread safety: immutable data.
#ifndef KVTIER_ENGINE_DEMO_SCRIPT_H_
#define KVTIER_ENGINE_DEMO_SCRIPT_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::engine {

// The shared system prompt (about 1.3 KB).
std::string_view DemoSystemPrompt();

// The user messages; conversation c, turn t asks message (c × 5 + t × 3) mod
// count, so conversations differ from their first turn.
std::span<const std::string_view> DemoUserMessages();

// Bytes as token ids.
std::vector<uint32_t> ByteTokens(std::string_view text);

}  // namespace kvtier::engine

#endif  // KVTIER_ENGINE_DEMO_SCRIPT_H_
