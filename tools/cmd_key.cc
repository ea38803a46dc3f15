// `kvtier key`: prints the block keys of a token sequence (DESIGN.md §6,
// docs/block-key.md).
#include <charconv>
#include <iostream>
#include <memory>

#include "command.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "signature_form.h"
#include "token_list.h"

namespace kvtier::cli {
namespace {

// Token files are text; 64 MiB is millions of ids.
constexpr uint64_t kMaxTokenFileBytes = uint64_t{64} << 20;

struct KeyArgs {
  std::string model;
  std::string signature;
  std::string layout;
  std::string block_tokens;
  std::string salt;
  std::string adapter;
  std::string extra;
  std::string shard;
  std::string tokens;
  std::string tokens_file;
  // Presence, so that e.g. `--tokens ""` (zero tokens) differs from no --tokens.
  CLI::Option* model_opt = nullptr;
  CLI::Option* signature_opt = nullptr;
  CLI::Option* layout_opt = nullptr;
  CLI::Option* block_tokens_opt = nullptr;
  CLI::Option* tokens_opt = nullptr;
  CLI::Option* tokens_file_opt = nullptr;
};

Result<uint32_t> ParseBlockTokens(const std::string& text) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v == 0 ||
      v > UINT32_MAX) {
    return Status::InvalidArgument("--block-tokens: expected an integer 1..4294967295, got '" +
                                   text.substr(0, 40) + "'");
  }
  return static_cast<uint32_t>(v);
}

Result<std::vector<uint32_t>> ReadTokens(const KeyArgs& a) {
  const bool inline_tokens = a.tokens_opt->count() > 0;
  const bool file_tokens = a.tokens_file_opt->count() > 0;
  if (inline_tokens == file_tokens) {
    return Status::InvalidArgument("give exactly one of --tokens or --tokens-file");
  }
  // No token at all is a mistake (an empty shell variable, an empty file),
  // not a request for zero keys: said, not answered with empty output.
  if (inline_tokens) {
    Result<std::vector<uint32_t>> t = ParseTokenList(a.tokens);
    if (!t.ok()) return t.status().WithContext("--tokens");
    if (t->empty()) return Status::InvalidArgument("--tokens: no token ids (give at least one)");
    return t;
  }
  Result<std::vector<std::byte>> bytes =
      Env::Default()->ReadWholeFile(a.tokens_file, kMaxTokenFileBytes);
  if (!bytes.ok()) return bytes.status().WithContext("--tokens-file");
  std::string text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  Result<std::vector<uint32_t>> t = ParseTokenList(text);
  if (!t.ok()) return t.status().WithContext("--tokens-file " + a.tokens_file);
  if (t->empty()) {
    return Status::InvalidArgument("--tokens-file " + a.tokens_file +
                                   ": no token ids (give at least one)");
  }
  return t;
}

Result<NamespaceOptions> BuildNamespace(const KeyArgs& a) {
  NamespaceOptions o;
  if (a.model_opt->count() == 0) return Status::InvalidArgument("--model is required");
  o.model_id = a.model;
  const bool has_sig = a.signature_opt->count() > 0;
  const bool has_layout = a.layout_opt->count() > 0;
  if (has_sig == has_layout) {
    return Status::InvalidArgument("give exactly one of --signature or --layout");
  }
  uint32_t block_tokens = 0;
  if (a.block_tokens_opt->count() > 0) {
    KVTIER_ASSIGN_OR_RETURN(block_tokens, ParseBlockTokens(a.block_tokens));
  }
  if (has_sig) {
    if (block_tokens == 0) {
      return Status::InvalidArgument("--block-tokens is required with --signature");
    }
    // A made-up or mistyped signature would give keys no cache holds. (Its
    // bt= may differ from --block-tokens: the namespace hashes both.)
    Result<uint32_t> bt = CheckSignatureForm(a.signature);
    if (!bt.ok()) return bt.status().WithContext("--signature");
    o.layout_signature = a.signature;
    o.block_tokens = block_tokens;
  } else {
    Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), a.layout, block_tokens);
    if (!layout.ok()) return layout.status().WithContext("--layout");
    o.layout_signature = layout->Signature();
    o.block_tokens = layout->block_tokens;
  }
  o.salt = a.salt;
  o.adapter_id = a.adapter;
  o.extra = a.extra;
  o.shard = a.shard;
  if (Status s = ValidateShard(o.shard); !s.ok()) return s.WithContext("--shard");
  return o;
}

// Bad input of any kind (flags, tokens, files) is a usage error: exit 2.
int Run(const KeyArgs& a, const CommonFlags& flags) {
  Result<NamespaceOptions> opts = BuildNamespace(a);
  if (!opts.ok()) return ReportError(flags, opts.status());
  Result<KeyChain> chain = KeyChain::Create(*opts);
  if (!chain.ok()) return ReportError(flags, chain.status());
  Result<std::vector<uint32_t>> tokens = ReadTokens(a);
  if (!tokens.ok()) return ReportError(flags, tokens.status());

  const std::vector<BlockKey> keys = chain->KeysFor(*tokens);
  // Only full blocks have keys (DESIGN.md §3): say so on stderr, so that an
  // empty answer is not mistaken for a failure; stdout stays the keys.
  if (const size_t rest = tokens->size() % chain->block_tokens(); rest > 0) {
    std::cerr << "kvtier: note: " << (keys.empty() ? "all " : "the last ") << rest << " of "
              << tokens->size() << " tokens fill no block of " << chain->block_tokens()
              << " and get no key\n";
  }
  if (flags.json) {
    // Written by hand to keep "namespace" first (nlohmann::json sorts keys);
    // hex needs no escaping.
    std::string out = "{\"namespace\":\"" + chain->ns().Hex() + "\",\"keys\":[";
    out.reserve(out.size() + keys.size() * 67 + 3);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i > 0) out += ',';
      out += '"';
      out += keys[i].Hex();
      out += '"';
    }
    out += "]}\n";
    std::cout << out;
  } else {
    std::string out;
    out.reserve(keys.size() * 65);
    for (const BlockKey& k : keys) {
      out += k.Hex();
      out += '\n';
    }
    std::cout << out;
  }
  std::cout.flush();
  return std::cout.good() ? kExitOk : kExitFailure;
}

std::function<int()> SetupKey(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<KeyArgs>();
  a->model_opt = app->add_option("--model", a->model, "Model id (UTF-8), e.g. the HF repo name");
  a->signature_opt =
      app->add_option("--signature", a->signature, "Layout signature (ModelLayout::Signature())");
  a->layout_opt = app->add_option("--layout", a->layout,
                                  "Layout preset or .json file whose signature to use instead");
  a->block_tokens_opt = app->add_option(
      "--block-tokens", a->block_tokens,
      "Tokens per block (required with --signature; overrides the layout's with --layout)");
  app->add_option("--salt", a->salt, "Tenant salt (the argument's bytes)");
  app->add_option("--adapter", a->adapter, "Adapter id (UTF-8), e.g. a LoRA name");
  app->add_option("--extra", a->extra, "Extra namespace bytes (the argument's bytes)");
  app->add_option("--shard", a->shard,
                  "The part of the model's KV this process holds: tp=R/S;pp=R/S;cp=R/S, each "
                  "field left out when its size is 1 (docs/block-key.md)");
  a->tokens_opt = app->add_option("--tokens", a->tokens, "Token ids: 1,2,3");
  a->tokens_file_opt = app->add_option("--tokens-file", a->tokens_file,
                                       "File of token ids separated by commas or whitespace");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(key, "key", "Print the block keys of a token sequence", SetupKey);
}  // namespace kvtier::cli
