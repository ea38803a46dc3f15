// kvtier.block_keys, kvtier.KeyChain and kvtier.KeySequence: block keys v1
// (DESIGN.md §3), equal to `kvtier key`.
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "kvtier/block_key.h"
#include "python/convert.h"
#include "python/errors.h"
#include "python/register.h"

namespace kvtier::python {
namespace {

// Hashing runs without the GIL past this many tokens.
constexpr size_t kReleaseGilTokens = 4096;

py::list KeyList(const std::vector<BlockKey>& keys) {
  py::list out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = KeyToPy(keys[i]);
  return out;
}

std::vector<BlockKey> KeysOf(const KeyChain& chain, const std::vector<uint32_t>& tokens) {
  if (tokens.size() < kReleaseGilTokens) return chain.KeysFor(tokens);
  py::gil_scoped_release release;
  return chain.KeysFor(tokens);
}

// block_tokens: an int in 1..4294967295, or None where the layout gives it.
std::optional<uint32_t> BlockTokensFromPy(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  return static_cast<uint32_t>(IntFromPy(obj, "block_tokens", 1, UINT32_MAX));
}

std::string ModelFromPy(py::handle model) {
  if (!PyUnicode_Check(model.ptr())) ThrowInvalid("model: expected a str, got " + TypeName(model));
  return model.cast<std::string>();
}

// The namespace options of a KeyChain: `signature` is a str or a Layout
// (whose block_tokens is the default).
NamespaceOptions NamespaceFromPy(const std::string& model, py::handle signature,
                                 std::optional<uint32_t> block_tokens, py::handle salt,
                                 py::handle adapter, py::handle extra, py::handle shard) {
  NamespaceOptions ns;
  ns.model_id = model;
  if (py::isinstance<ModelLayout>(signature)) {
    const ModelLayout& layout = signature.cast<const ModelLayout&>();
    ns.layout_signature = layout.Signature();
    ns.block_tokens = block_tokens.value_or(layout.block_tokens);
  } else if (PyUnicode_Check(signature.ptr())) {
    ns.layout_signature = signature.cast<std::string>();
    if (!block_tokens.has_value()) {
      ThrowInvalid("block_tokens: required when signature is a str");
    }
    ns.block_tokens = *block_tokens;
  } else {
    ThrowInvalid("signature: expected a layout signature str or a kvtier.Layout, got " +
                 TypeName(signature));
  }
  ns.salt = BytesFromPy(salt, "salt");
  if (!adapter.is_none() && !PyUnicode_Check(adapter.ptr())) {
    ThrowInvalid("adapter: expected a str, got " + TypeName(adapter));
  }
  ns.adapter_id = adapter.is_none() ? "" : adapter.cast<std::string>();
  ns.extra = BytesFromPy(extra, "extra");
  if (!shard.is_none() && !PyUnicode_Check(shard.ptr())) {
    ThrowInvalid("shard: expected a str such as 'tp=0/2', got " + TypeName(shard));
  }
  ns.shard = shard.is_none() ? "" : shard.cast<std::string>();
  // Checked here too so that the message names the argument.
  if (Status s = ValidateShard(ns.shard); !s.ok()) Throw(s.WithContext("shard"));
  return ns;
}

// Keys of one growing token sequence: tokens arrive in pieces, a key comes
// out whenever a block fills.
class KeySequence {
 public:
  explicit KeySequence(KeyChain chain) : chain_(std::move(chain)), last_(chain_.ns()) {}

  std::vector<BlockKey> Append(const std::vector<uint32_t>& tokens) {
    std::vector<BlockKey> added;
    const uint32_t n = chain_.block_tokens();
    for (uint32_t t : tokens) {
      pending_.push_back(t);
      if (pending_.size() == n) {
        last_ = chain_.Next(last_, pending_);
        keys_.push_back(last_);
        added.push_back(last_);
        pending_.clear();
      }
    }
    return added;
  }

  const std::vector<BlockKey>& keys() const { return keys_; }
  const BlockKey& last() const { return last_; }
  size_t pending() const { return pending_.size(); }
  uint64_t tokens() const {
    return keys_.size() * uint64_t{chain_.block_tokens()} + pending_.size();
  }

 private:
  KeyChain chain_;
  BlockKey last_;  // the parent of the next key: the namespace at first
  std::vector<BlockKey> keys_;
  std::vector<uint32_t> pending_;  // tokens of the block being filled
};

}  // namespace

void RegisterKeys(py::module_& m) {
  m.def(
      "block_keys",
      [](PyText model, PySignatureArg signature, PyInt block_tokens, PyTokens tokens,
         PyBytesOrText salt, PyText adapter, PyBytesOrText extra, PyText shard) -> PyKeyList {
        const std::optional<uint32_t> bt = BlockTokensFromPy(block_tokens);
        if (!bt.has_value()) ThrowInvalid("block_tokens: expected an int, got None");
        const NamespaceOptions ns =
            NamespaceFromPy(ModelFromPy(model), signature, bt, salt, adapter, extra, shard);
        const KeyChain chain = ValueOrThrow(KeyChain::Create(ns));
        return KeyList(KeysOf(chain, TokensFromPy(tokens, "tokens")));
      },
      py::arg("model"), py::arg("signature"), py::arg("block_tokens"), py::arg("tokens"),
      py::kw_only(), py::arg("salt") = py::bytes(), py::arg("adapter") = "",
      py::arg("extra") = py::bytes(), py::arg("shard") = "",
      "The 32-byte keys of the full blocks of `tokens` (block key v1, as `kvtier key` "
      "prints them). shard: the part of the model's KV this process holds, "
      "'tp=<rank>/<size>;pp=<rank>/<size>;cp=<rank>/<size>' with each field left out when its "
      "size is 1 ('' = the whole model; docs/block-key.md).");

  // Registered first: KeyChain.sequence() returns one, and help() names a
  // type only once it is registered.
  py::class_<KeySequence> sequence(m, "KeySequence",
                                   "The keys of one sequence whose tokens arrive in pieces.");

  py::class_<KeyChain>(m, "KeyChain",
                       "A key namespace (model, layout signature, block size, tenant salt, "
                       "adapter, extra, shard): the keys of any token sequence under it.")
      .def(py::init([](PyText model, PySignatureArg signature, PyIntOrNone block_tokens,
                       PyBytesOrText salt, PyText adapter, PyBytesOrText extra, PyText shard) {
             return ValueOrThrow(KeyChain::Create(NamespaceFromPy(ModelFromPy(model), signature,
                                                                  BlockTokensFromPy(block_tokens),
                                                                  salt, adapter, extra, shard)));
           }),
           py::arg("model"), py::arg("signature"), py::arg("block_tokens") = py::none(),
           py::kw_only(), py::arg("salt") = py::bytes(), py::arg("adapter") = "",
           py::arg("extra") = py::bytes(), py::arg("shard") = "",
           "signature: a layout signature str (then block_tokens is required) or a "
           "kvtier.Layout (block_tokens defaults to its own).")
      .def_property_readonly(
          "namespace", [](const KeyChain& c) { return KeyToPy(c.ns()); },
          "The namespace key: the parent of the first block.")
      .def_property_readonly("block_tokens", &KeyChain::block_tokens)
      .def(
          "keys",
          [](const KeyChain& c, PyTokens tokens) -> PyKeyList {
            return KeyList(KeysOf(c, TokensFromPy(tokens, "tokens")));
          },
          py::arg("tokens"), "Keys of all full blocks of `tokens`, in order.")
      .def(
          "next",
          [](const KeyChain& c, PyKey parent, PyTokens block, PyBytesLike extra) {
            const BlockKey p = KeyFromPy(parent, "parent");
            const std::vector<uint32_t> t = TokensFromPy(block, "block");
            if (t.size() != c.block_tokens()) {
              ThrowInvalid("block: expected " + std::to_string(c.block_tokens()) + " tokens, got " +
                           std::to_string(t.size()));
            }
            const std::string e = BytesFromPy(extra, "extra");
            return KeyToPy(c.Next(p, t,
                                  std::span<const std::byte>(
                                      reinterpret_cast<const std::byte*>(e.data()), e.size())));
          },
          py::arg("parent"), py::arg("block"), py::arg("extra") = py::bytes(),
          "The key of the block after `parent` (the namespace for the first block); "
          "`extra` (e.g. a multimodal input hash) is appended as TLV 0x10 when non-empty.")
      .def(
          "sequence", [](const KeyChain& c) { return KeySequence(c); },
          "A KeySequence: keys of one growing token sequence.");

  sequence
      .def(
          "append",
          [](KeySequence& s, PyTokens tokens) -> PyKeyList {
            return KeyList(s.Append(TokensFromPy(tokens, "tokens")));
          },
          py::arg("tokens"), "Adds tokens; returns the keys of the blocks they completed.")
      .def_property_readonly(
          "keys", [](const KeySequence& s) -> PyKeyList { return KeyList(s.keys()); },
          "Keys of every full block so far.")
      .def_property_readonly(
          "last_key", [](const KeySequence& s) { return KeyToPy(s.last()); },
          "The parent of the next block: the last key, or the namespace.")
      .def_property_readonly("pending_tokens", &KeySequence::pending,
                             "Tokens of the block not yet full.")
      .def_property_readonly("num_tokens", &KeySequence::tokens)
      .def("__len__", [](const KeySequence& s) { return s.keys().size(); });
}

}  // namespace kvtier::python
