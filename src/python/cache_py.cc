// kvtier.Cache: a TieredCache (RAM over an optional disk folder) for Python
// engines (DESIGN.md §8). Byte buffers cross through the buffer protocol;
// every call that may wait on a lock, a copy or the disk releases the GIL
// (also because the tiers' threads take it to log, python/logger_py.h).
//
// A call takes its own reference to the TieredCache, so close() from
// another thread cannot free it under a running call (TieredCache::Close
// waits for calls in progress; later calls get kvtier.FailedPrecondition).
#include <pybind11/stl.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings/cache_spec.h"
#include "bindings/option_table.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/tiered_cache.h"
#include "python/codec_py.h"
#include "python/convert.h"
#include "python/errors.h"
#include "python/leading_run.h"
#include "python/logger_py.h"
#include "python/register.h"

namespace kvtier::python {
namespace {

// A keyword's value as the JSON the options table reads (DESIGN.md §8):
// None, bool, int (64 bits), float, str, os.PathLike (its str), bytes and
// lists of them, nested at most as deep as JSON text may be.
nlohmann::json OptionToJson(const std::string& name, py::handle obj, int depth = 0) {
  if (obj.is_none()) return nullptr;
  if (PyBool_Check(obj.ptr())) return obj.ptr() == Py_True;
  if (PyLong_Check(obj.ptr())) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
    if (overflow == 0) {
      // Non-negative ints as unsigned: what the table's integer options read.
      if (v >= 0) return static_cast<uint64_t>(v);
      return static_cast<int64_t>(v);
    }
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(obj.ptr());
      if (PyErr_Occurred() == nullptr) return static_cast<uint64_t>(u);
      PyErr_Clear();
    }
    ThrowInvalid(name + ": " + std::string(py::str(obj)) + " does not fit 64 bits");
  }
  if (PyFloat_Check(obj.ptr())) return PyFloat_AsDouble(obj.ptr());
  if (PyUnicode_Check(obj.ptr())) return obj.cast<std::string>();
  if (PyBytes_Check(obj.ptr()) || PyByteArray_Check(obj.ptr())) {
    const std::string bytes = py::bytes(py::reinterpret_borrow<py::object>(obj));
    return nlohmann::json::binary(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  if (py::hasattr(obj, "__fspath__")) {
    py::object path = obj.attr("__fspath__")();
    if (PyUnicode_Check(path.ptr())) return path.cast<std::string>();
  }
  if (PyList_Check(obj.ptr()) || PyTuple_Check(obj.ptr())) {
    // A list option (remote_mac_keys: paths).
    if (depth >= bindings::kMaxOptionJsonDepth) {
      ThrowInvalid(name + ": lists nested deeper than " +
                   std::to_string(bindings::kMaxOptionJsonDepth) + " levels");
    }
    nlohmann::json items = nlohmann::json::array();
    for (py::handle item : obj) items.push_back(OptionToJson(name, item, depth + 1));
    return items;
  }
  ThrowInvalid(name + ": expected an int, str, bool, bytes, path, list or None, got " +
               TypeName(obj));
}

// Applies keyword options (a dict) to `spec`; a "config" member is a file
// read first.
void ApplyPyOptions(py::handle options, bindings::CacheSpec* spec) {
  nlohmann::json object = nlohmann::json::object();
  for (auto [name, value] : py::reinterpret_borrow<py::dict>(options)) {
    if (!PyUnicode_Check(name.ptr())) ThrowInvalid("options: names must be str");
    const std::string n = name.cast<std::string>();
    object[n] = OptionToJson(n, value);
  }
  ThrowIfError(bindings::ApplyOptions(object, spec));
}

class PyCache {
 public:
  // kvtier.Cache(layout, **options): `layout` a preset name, a layout JSON
  // path or a kvtier.Layout.
  PyCache(PyLayoutArg layout, const py::args& extra, const py::kwargs& options) {
    if (!extra.empty()) {
      ThrowInvalid("Cache(): the layout is the only positional argument (got " +
                   std::to_string(extra.size() + 1) +
                   "); pass the options as keywords, e.g. Cache(\"tiny\", host_bytes=1 << 20)");
    }
    RequireArg(layout, "layout");
    bindings::CacheSpec spec;
    ApplyPyOptions(options, &spec);
    Open(layout, std::move(spec));
  }

  // kvtier.Cache.from_config(path_or_dict).
  static std::unique_ptr<PyCache> FromConfig(PyConfigArg config) {
    bindings::CacheSpec spec;
    py::object layout = py::none();
    if (PyDict_Check(config.ptr())) {
      py::dict options = config.attr("copy")();
      // A kvtier.Layout object is not JSON: taken as is.
      if (options.contains("layout") && py::isinstance<ModelLayout>(options["layout"])) {
        layout = options.attr("pop")("layout");
      }
      ApplyPyOptions(options, &spec);
    } else {
      const nlohmann::json path = OptionToJson("config", config);
      if (!path.is_string()) {
        ThrowInvalid("config: expected a JSON file path or a dict of options, got " +
                     TypeName(config));
      }
      ThrowIfError(bindings::ApplyConfigFile(path.get<std::string>(), &spec));
    }
    if (layout.is_none()) {
      if (!spec.Has("layout")) ThrowInvalid("layout: is required");
      layout = py::str(spec.layout);
    }
    auto cache = std::unique_ptr<PyCache>(new PyCache());
    cache->Open(layout, std::move(spec));
    return cache;
  }

  // Closes an unclosed cache with the GIL released: its threads may be
  // logging (they take the GIL) while the tiers join them.
  ~PyCache() {
    if (cache_ == nullptr || AbandonInForkedChild()) return;
    py::gil_scoped_release release;
    cache_.reset();
  }
  PyCache(const PyCache&) = delete;
  PyCache& operator=(const PyCache&) = delete;

  void Store(PyKey key, PyBuffer block) {
    const BlockKey k = KeyFromPy(key, "key");
    BufferView view(block, "block", BufferView::Access::kRead);
    std::shared_ptr<TieredCache> cache = Live("store");
    Status s;
    {
      py::gil_scoped_release release;
      s = StoreBuffer(*cache, k, BlockBuffer::CopyOf(view.bytes()));
    }
    ThrowIfError(s);
  }

  void StoreTensors(PyKey key, PyKey parent, PyKey ns, PyTensors tensors, PyInt token_count,
                    PyIntOrNone created_at) {
    const BlockKey k = KeyFromPy(key, "key");
    const BlockKey p = KeyFromPy(parent, "parent");
    const BlockKey n = KeyFromPy(ns, "namespace");
    // The chain rule (DESIGN.md §3): a key hashes its parent (the namespace
    // for block 0), so it never equals either; equal bytes mean arguments
    // passed in the wrong order or the key reused as its own parent.
    if (k == p) ThrowInvalid("parent: equals key (a block's parent is the previous block's key)");
    if (k == n) ThrowInvalid("namespace: equals key (pass the chain's namespace hash)");
    std::shared_ptr<TieredCache> cache = Live("store_tensors");
    Result<BlockBuffer> block = EncodeFromPy(layout_, k, p, n, tensors, TokenCountFromPy(token_count),
                                             CreatedAtFromPy(created_at));
    Status s;
    {
      py::gil_scoped_release release;
      s = StoreBuffer(*cache, k, std::move(block));
    }
    ThrowIfError(s);
  }

  size_t Match(PyKeys keys) {
    const std::vector<BlockKey> chain = KeysFromPy(keys, "keys");
    std::shared_ptr<TieredCache> cache = Live("match");
    py::gil_scoped_release release;
    return cache->Match(chain).blocks;
  }

  size_t LoadInto(PyKey key, PyBuffer out) {
    const BlockKey k = KeyFromPy(key, "key");
    BufferView view(out, "out", BufferView::Access::kWrite);
    if (!view.IsByteFormat()) {
      ThrowInvalid("out: expected a byte buffer (e.g. numpy uint8), got format '" + view.format() +
                   "' with " + std::to_string(view.itemsize()) + "-byte elements");
    }
    std::shared_ptr<TieredCache> cache = Live("load_into");
    Result<std::vector<LoadedBlock>> loaded = [&]() -> Result<std::vector<LoadedBlock>> {
      py::gil_scoped_release release;
      const std::span<std::byte> dsts[] = {view.mutable_bytes()};
      KVTIER_ASSIGN_OR_RETURN(LoadFuture future,
                              cache->Load(std::span<const BlockKey>(&k, 1), dsts));
      return future.Get();
    }();
    if (!loaded.ok()) {
      // One key, one buffer: the only InvalidArgument is a buffer that is
      // smaller than the block. Say how large it is.
      if (loaded.status().IsInvalidArgument()) {
        Result<SharedBlock> block = [&] {
          py::gil_scoped_release release;
          return LoadOne(*cache, k);
        }();
        const std::string need = block.ok() && *block != nullptr
                                     ? " (" + std::to_string((*block)->size()) + " bytes)"
                                     : "";
        ThrowInvalid("out: " + std::to_string(view.bytes().size()) +
                     " bytes is smaller than block " + k.Hex() + need);
      }
      Throw(loaded.status());
    }
    const LoadedBlock& b = (*loaded)[0];
    return b.tier == CacheTier::kNone ? 0 : static_cast<size_t>(b.bytes);
  }

  PyBytesOrNone Load(PyKey key) {
    const BlockKey k = KeyFromPy(key, "key");
    std::shared_ptr<TieredCache> cache = Live("load");
    Result<SharedBlock> block = [&] {
      py::gil_scoped_release release;
      return LoadOne(*cache, k);
    }();
    if (!block.ok()) Throw(block.status());
    if (*block == nullptr) return py::none();
    const SharedBlock& b = *block;
    // A fresh bytes object is the caller's own copy: filled before anyone
    // else can see it.
    py::bytes out = py::reinterpret_steal<py::bytes>(
        PyBytes_FromStringAndSize(nullptr, static_cast<py::ssize_t>(b->size())));
    if (!out) throw py::error_already_set();
    char* dst = PyBytes_AS_STRING(out.ptr());
    {
      py::gil_scoped_release release;
      std::memcpy(dst, b->data(), b->size());
    }
    return out;
  }

  bool LoadTensors(PyKey key, PyTensors outs) {
    const BlockKey k = KeyFromPy(key, "key");
    std::shared_ptr<TieredCache> cache = Live("load_tensors");
    const std::vector<std::unique_ptr<BufferView>> views =
        TensorViews(layout_, outs, BufferView::Access::kWrite);
    Result<bool> hit = [&]() -> Result<bool> {
      py::gil_scoped_release release;
      KVTIER_ASSIGN_OR_RETURN(SharedBlock block, LoadOne(*cache, k));
      if (block == nullptr) return false;
      // The cache verified the block where it entered the process (a disk
      // read, or the header at Store); the structure, key and layout are
      // checked again here, the data checksum is not recomputed.
      DecodeOptions opts;
      opts.expected_key = &k;
      opts.expected_signature = &signature_;
      opts.expected_layout = &layout_;
      opts.verify_checksum = false;
      KVTIER_ASSIGN_OR_RETURN(DecodedBlock decoded, DecodeBlock(block->span(), opts));
      for (size_t i = 0; i < views.size(); ++i) {
        const std::span<const std::byte> src = decoded.tensors[i].data;
        std::memcpy(views[i]->mutable_bytes().data(), src.data(), src.size());
      }
      return true;
    }();
    if (!hit.ok()) Throw(hit.status());
    return *hit;
  }

  // One list (or dict) of tensor buffers per key, as load_tensors takes;
  // True where the block was found and its tensors copied. Every buffer is
  // exported and checked first, with the GIL; then one LoadShared reads the
  // disk and remote parts in parallel, and each block's tensors are copied
  // straight into its buffers on the thread that delivered it, without the
  // GIL: no staging copy of the block file, no second checksum (the cache
  // verified each block where it entered the process; the structure, key
  // and layout are checked again here). A block that fails that check is a
  // miss, its buffers untouched, and is logged (logger "kvtier").
  // prefix_group > 0: only the leading run of whole groups of that many
  // keys is copied (LeadingRun); nothing past it is written.
  std::vector<bool> LoadManyTensors(PyKeys keys, PyAny outs, PyInt prefix_group) {
    const std::vector<BlockKey> ks = KeysFromPy(keys, "keys");
    const auto group = static_cast<size_t>(IntFromPy(prefix_group, "prefix_group", 0, INT64_MAX));
    if (PyUnicode_Check(outs.ptr()) || PyObject_CheckBuffer(outs.ptr()) ||
        !PySequence_Check(outs.ptr()) || py::isinstance<py::dict>(outs)) {
      ThrowInvalid("outs: expected a list with one list (or dict) of tensor buffers per key, got " +
                   TypeName(outs));
    }
    py::sequence seq = py::reinterpret_borrow<py::sequence>(outs);
    if (seq.size() != ks.size()) {
      ThrowInvalid("outs: " + std::to_string(seq.size()) + " entries for " +
                   std::to_string(ks.size()) + " keys");
    }
    std::vector<std::vector<std::unique_ptr<BufferView>>> views(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      try {
        views[i] = TensorViews(layout_, seq[i], BufferView::Access::kWrite);
      } catch (const StatusError& e) {
        ThrowInvalid("outs[" + std::to_string(i) + "]: " + e.status().message());
      }
    }
    std::shared_ptr<TieredCache> cache = Live("load_many_tensors");
    // Each index is written by the one callback of its key, or by the one
    // that finds it due (LeadingRun returns an index once, after the
    // callback that stored its decoded view released LeadingRun's mutex).
    std::vector<char> copied(ks.size(), 0);
    std::vector<std::string> refused(ks.size());
    std::vector<std::optional<DecodedBlock>> decoded(ks.size());
    auto copy = [&](size_t i) {
      for (size_t t = 0; t < views[i].size(); ++t) {
        const std::span<const std::byte> src = decoded[i]->tensors[t].data;
        std::memcpy(views[i][t]->mutable_bytes().data(), src.data(), src.size());
      }
      copied[i] = 1;
    };
    std::optional<LeadingRun> run;
    if (group > 0) run.emplace(ks.size(), group);
    SharedLoadOptions options;
    options.on_block = [&](size_t i, const LoadedBlock& b) {
      SharedBlock block = b.block;
      if (block != nullptr) {
        DecodeOptions opts;
        opts.expected_key = &ks[i];
        opts.expected_signature = &signature_;
        opts.expected_layout = &layout_;
        opts.verify_checksum = false;
        Result<DecodedBlock> d = DecodeBlock(block->span(), opts);
        if (d.ok()) {
          decoded[i] = *std::move(d);  // views into `block`, kept alive below
        } else {
          refused[i] = d.status().ToString();
          block.reset();  // a miss
        }
      }
      if (!run.has_value()) {
        if (block != nullptr) copy(i);
        return;
      }
      // Held blocks stay alive in `due` while their views are copied.
      for (auto& [j, due] : run->Land(i, std::move(block))) copy(j);
    };
    Status done = [&]() -> Status {
      py::gil_scoped_release release;
      KVTIER_ASSIGN_OR_RETURN(LoadFuture future, cache->LoadShared(ks, std::move(options)));
      return future.Get().status();
    }();
    ThrowIfError(done);
    for (size_t i = 0; i < ks.size(); ++i) {
      if (refused[i].empty()) continue;
      py::module_::import("logging").attr("getLogger")("kvtier").attr("warning")(
          "load_many_tensors: block %s not copied (a miss): %s", ks[i].Hex(), refused[i]);
    }
    return std::vector<bool>(copied.begin(), copied.end());
  }

  // One buffer per key; 0 for a miss. Every buffer is exported first, with
  // the GIL; then one Load reads the disk and remote parts in parallel on
  // the load threads and copies each block into its buffer, without it.
  std::vector<size_t> LoadMany(PyKeys keys, PyBuffers outs) {
    const std::vector<BlockKey> ks = KeysFromPy(keys, "keys");
    if (PyUnicode_Check(outs.ptr()) || PyObject_CheckBuffer(outs.ptr()) ||
        !PySequence_Check(outs.ptr())) {
      ThrowInvalid("outs: expected a list of writable buffers, got " + TypeName(outs));
    }
    py::sequence seq = py::reinterpret_borrow<py::sequence>(outs);
    if (seq.size() != ks.size()) {
      ThrowInvalid("outs: " + std::to_string(seq.size()) + " buffers for " +
                   std::to_string(ks.size()) + " keys");
    }
    std::vector<std::unique_ptr<BufferView>> views;
    std::vector<std::span<std::byte>> dsts;
    views.reserve(ks.size());
    dsts.reserve(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      const std::string what = "outs[" + std::to_string(i) + "]";
      views.push_back(
          std::make_unique<BufferView>(seq[i], what.c_str(), BufferView::Access::kWrite));
      if (!views.back()->IsByteFormat()) {
        ThrowInvalid(what + ": expected a byte buffer (e.g. numpy uint8), got format '" +
                     views.back()->format() + "'");
      }
      dsts.push_back(views.back()->mutable_bytes());
    }
    std::shared_ptr<TieredCache> cache = Live("load_many");
    Result<std::vector<LoadedBlock>> loaded = [&]() -> Result<std::vector<LoadedBlock>> {
      py::gil_scoped_release release;
      KVTIER_ASSIGN_OR_RETURN(LoadFuture future, cache->Load(ks, dsts));
      return future.Get();
    }();
    if (!loaded.ok()) {
      if (loaded.status().IsInvalidArgument()) {
        ThrowInvalid("outs: " + loaded.status().message() +
                     " (every other block was loaded; size buffers with len(load(key)))");
      }
      Throw(loaded.status());
    }
    std::vector<size_t> sizes(ks.size());
    for (size_t i = 0; i < ks.size(); ++i) {
      const LoadedBlock& b = (*loaded)[i];
      sizes[i] = b.tier == CacheTier::kNone ? 0 : static_cast<size_t>(b.bytes);
    }
    return sizes;
  }

  PyTextOrNone Contains(PyKey key) {
    const BlockKey k = KeyFromPy(key, "key");
    std::shared_ptr<TieredCache> cache = Live("contains");
    CacheTier tier;
    {
      py::gil_scoped_release release;
      tier = cache->Contains(k);
    }
    if (tier == CacheTier::kNone) return py::none();
    return py::str(std::string(CacheTierName(tier)));
  }

  bool Erase(PyKey key) {
    const BlockKey k = KeyFromPy(key, "key");
    std::shared_ptr<TieredCache> cache = Live("erase");
    Result<bool> erased = [&] {
      py::gil_scoped_release release;
      return cache->Erase(k);
    }();
    if (!erased.ok()) Throw(erased.status());
    return *erased;
  }

  uint64_t Clear() {
    std::shared_ptr<TieredCache> cache = Live("clear");
    Result<uint64_t> erased = [&] {
      py::gil_scoped_release release;
      return cache->Clear();
    }();
    if (!erased.ok()) Throw(erased.status());
    return *erased;
  }

  std::string Prometheus() {
    std::shared_ptr<TieredCache> cache = Live("prometheus");
    py::gil_scoped_release release;
    return cache->Prometheus();
  }

  void Flush() {
    std::shared_ptr<TieredCache> cache = Live("flush");
    Status s;
    {
      py::gil_scoped_release release;
      s = cache->Flush();
    }
    ThrowIfError(s);
  }

  PyDict Stats() {
    std::shared_ptr<TieredCache> cache = Live("stats");
    std::string json;
    {
      py::gil_scoped_release release;
      json = cache->Stats().ToJson();
    }
    return py::module_::import("json").attr("loads")(json);
  }

  void Close() {
    if (cache_ == nullptr || AbandonInForkedChild()) return;
    std::shared_ptr<TieredCache> cache = std::move(cache_);
    cache_.reset();
    Status s;
    {
      py::gil_scoped_release release;
      s = cache->Close();
      cache.reset();
    }
    // The lines the cache logged until now (from its threads too) reach
    // logging before close() returns.
    DrainPythonLog();
    ThrowIfError(s);
  }

  bool closed() const { return cache_ == nullptr; }
  const ModelLayout& layout() const { return layout_; }

  // The cache's key chain (key_model_id, key_salt, key_adapter_id, key_extra, key_shard
  // and the layout), or None without key_model_id.
  PyKeyChainOrNone KeyChainOf() const {
    if (key_.model_id.empty()) return py::reinterpret_borrow<PyKeyChainOrNone>(py::none());
    NamespaceOptions ns = key_;
    ns.layout_signature = signature_;
    ns.block_tokens = layout_.block_tokens;
    return py::reinterpret_steal<PyKeyChainOrNone>(
        py::cast(ValueOrThrow(KeyChain::Create(ns))).release());
  }

 private:
  PyCache() = default;

  void Open(py::handle layout, bindings::CacheSpec spec) {
    spec.cache.info_log = PythonLog();
    ModelLayout resolved = LayoutFromPy(layout, "layout", spec.block_tokens);
    Result<bindings::OpenedCache> opened = [&] {
      py::gil_scoped_release release;
      return bindings::OpenCacheForLayout(std::move(resolved), spec);
    }();
    if (!opened.ok()) Throw(opened.status());
    layout_ = std::move(opened->layout);
    signature_ = layout_.Signature();
    key_ = spec.key;
    cache_ = std::move(opened->cache);
    opened_by_ = getpid();
  }

  std::shared_ptr<TieredCache> Live(const char* fn) const {
    if (cache_ == nullptr) {
      Throw(Status::FailedPrecondition(std::string("Cache.") + fn + ": the cache is closed"));
    }
    if (const pid_t pid = getpid(); pid != opened_by_) {
      Throw(Status::FailedPrecondition(
          std::string("Cache.") + fn + ": this cache was opened by process " +
          std::to_string(opened_by_) + " and process " + std::to_string(pid) +
          " (a fork of it) cannot use it: its threads did not survive the fork; open a new "
          "kvtier.Cache in this process (docs/python.md, Processes and fork)"));
    }
    return cache_;
  }

  // In a process forked from the one that opened the cache, the tiers'
  // threads do not exist and their locks may be held forever: closing would
  // join threads that are not there or wait on a lock. The handle is
  // dropped without running a destructor (the memory is the parent's
  // copy-on-write image; the parent's cache is untouched). True if so.
  bool AbandonInForkedChild() {
    if (getpid() == opened_by_) return false;
    // Kept reachable, never destroyed (and not reported as a leak).
    static auto* abandoned = new std::vector<std::shared_ptr<TieredCache>>();
    abandoned->push_back(std::move(cache_));
    cache_.reset();
    return true;
  }

  // One key through LoadShared: the verified block, or null on a miss.
  static Result<SharedBlock> LoadOne(TieredCache& cache, const BlockKey& key) {
    KVTIER_ASSIGN_OR_RETURN(LoadFuture future,
                            cache.LoadShared(std::span<const BlockKey>(&key, 1)));
    KVTIER_ASSIGN_OR_RETURN(std::vector<LoadedBlock> loaded, future.Get());
    if (loaded[0].tier == CacheTier::kNone) return SharedBlock();
    return loaded[0].block;
  }

  static Status StoreBuffer(TieredCache& cache, const BlockKey& key, Result<BlockBuffer> block) {
    if (!block.ok()) return block.status();
    const SharedBlock shared = std::make_shared<const BlockBuffer>(std::move(*block));
    return cache.Store(std::span<const BlockKey>(&key, 1),
                       std::span<const SharedBlock>(&shared, 1));
  }

  ModelLayout layout_;
  std::string signature_;
  NamespaceOptions key_;                // model_id, salt, adapter_id, extra from the options
  std::shared_ptr<TieredCache> cache_;  // null once closed; guarded by the GIL
  pid_t opened_by_ = 0;                 // the process that opened cache_
};

}  // namespace

void RegisterCache(py::module_& m) {
  m.def(
      "options",
      [] {
        py::list out;
        for (const bindings::OptionInfo& o : bindings::Options()) {
          py::dict d;
          d["name"] = o.name;
          d["type"] = o.type;
          d["default"] = o.default_value;
          d["doc"] = o.doc;
          out.append(d);
        }
        return out;
      },
      "Every option of kvtier.Cache, Cache.from_config, the C API and --config, as a list of "
      "dicts {name, type, default, doc} (docs/options.md).");
  m.def(
      "_check_options",
      [](PyDict options) {
        if (!PyDict_Check(options.ptr())) {
          ThrowInvalid("options: expected a dict of options, got " + TypeName(options));
        }
        bindings::CacheSpec spec;
        ApplyPyOptions(options, &spec);
      },
      py::arg("options"),
      "Checks a dict of options as kvtier.Cache would (kvtier.InvalidArgument naming a bad or "
      "unknown one) without opening anything: for integrations that open the cache later.");
  py::class_<PyCache>(m, "Cache",
                      "Blocks by key in RAM over an optional disk folder and an optional Redis "
                      "server: kvtier.Cache(layout, host_bytes=..., disk_dir=..., remote=..., "
                      "**options), every option of kvtier.options() (docs/options.md). A miss "
                      "is None / 0, not an error. Use it as a context manager or call close().")
      .def(py::init<PyLayoutArg, const py::args&, const py::kwargs&>(),
           py::arg("layout") = py::none(),
           "layout: a preset name, a layout JSON path or a kvtier.Layout. Keywords: "
           "host_bytes (required: the RAM budget, bytes or \"1GiB\"), disk_dir (a folder for "
           "the disk tier, created if missing; None for RAM only), remote (a Redis URL, "
           "redis://host:port or redis-cluster://host:port,..., None for none), block_tokens, "
           "write_policy (\"write_back\" | \"write_through\"), disk_max_bytes, "
           "disk_durability (\"checksum\" | \"fsync\"), ... (kvtier.options()). An unknown "
           "keyword or a bad value raises kvtier.InvalidArgument naming it.")
      .def_static("from_config", &PyCache::FromConfig, py::arg("path_or_dict"),
                  "Opens a cache from a JSON config file (one object of options, `layout` "
                  "included) or a dict of the same; a \"config\" member names a file read "
                  "first, the other members override it.")
      .def_property_readonly(
          "key_chain", &PyCache::KeyChainOf,
          "A kvtier.KeyChain for this cache's namespace (key_model_id, key_shard, "
          "key_salt, key_adapter_id, key_extra and the layout), or None "
          "when key_model_id was not given.")
      .def("store", &PyCache::Store, py::arg("key"), py::arg("block"),
           "Stores a block file (bytes-like) under its 32-byte key. Its header must name the "
           "key and the cache's layout (kvtier.InvalidArgument otherwise). The bytes are "
           "copied.")
      .def("store_tensors", &PyCache::StoreTensors, py::arg("key"), py::arg("parent"),
           py::arg("namespace"), py::arg("tensors"), py::kw_only(), py::arg("token_count") = 0,
           py::arg("created_at") = py::none(),
           "encode_block(self.layout, key, parent, namespace, tensors) and store() in one "
           "call, without making a bytes object: one copy of the tensors.")
      .def("match", &PyCache::Match, py::arg("keys"),
           "How many leading keys of `keys` (a chain) some tier holds. Reads no data.")
      .def("load", &PyCache::Load, py::arg("key"),
           "The block file stored under `key` as bytes (a copy of the verified block), or "
           "None on a miss.")
      .def("load_tensors", &PyCache::LoadTensors, py::arg("key"), py::arg("outs"),
           "Copies the block's tensors straight into `outs` (a list in the order of "
           "layout.tensors() or a dict by name; each a writable, C-contiguous buffer of exactly "
           "the tensor's bytes, e.g. a slot of the engine's KV pool). A host hit is copied "
           "from the host tier's own buffer: one copy. Returns False on a miss.")
      .def("load_into", &PyCache::LoadInto, py::arg("key"), py::arg("out"),
           "Copies the block file stored under `key` into the front of `out` (a writable, "
           "C-contiguous byte buffer, e.g. numpy uint8) and returns its size; 0 on a miss. "
           "kvtier.InvalidArgument if `out` is too small or not a byte buffer.")
      .def("load_many_tensors", &PyCache::LoadManyTensors, py::arg("keys"), py::arg("outs"),
           py::kw_only(), py::arg("prefix_group") = 0,
           "load_many_tensors(keys: list[bytes], outs: list[list[buffer] | dict], *, "
           "prefix_group: int = 0) -> list[bool]\n\n"
           "Copies the tensors of block keys[i] straight into outs[i] (as load_tensors takes: "
           "a list in the order of layout.tensors() or a dict by name, each a writable, "
           "C-contiguous buffer of exactly the tensor's bytes) for every i, reading the disk "
           "and remote blocks in parallel; True where the block was found. One copy per "
           "tensor, no staging buffer, no second checksum; the GIL is released for the whole "
           "call. Every buffer is checked before anything is read (kvtier.InvalidArgument). "
           "A block whose header does not match its key or the layout is False (logged). "
           "prefix_group=N > 0: only the leading run of whole groups of N keys found (an "
           "engine's page of N blocks) is copied, False from the first group with a miss on; "
           "nothing past that run is written.")
      .def("load_many", &PyCache::LoadMany, py::arg("keys"), py::arg("outs"),
           "load_many(keys: list[bytes], outs: list[buffer]) -> list[int]\n\n"
           "Copies block keys[i] into the front of outs[i] (writable, C-contiguous byte "
           "buffers, e.g. numpy uint8 arrays or bytearrays) for every i, reading the disk and "
           "remote blocks in parallel, and returns each block's size; 0 for a miss. The GIL "
           "is released for the whole call. kvtier.InvalidArgument if a buffer is too small "
           "(the others are still filled).")
      .def("contains", &PyCache::Contains, py::arg("key"),
           "contains(key: bytes) -> str | None\n\n"
           "The fastest tier holding `key`: \"host\", \"disk\" or \"remote\", or None. "
           "Reads no block data (the disk tier's index; one Redis GETRANGE of the "
           "value's first 8 bytes, its header length).")
      .def("erase", &PyCache::Erase, py::arg("key"),
           "erase(key: bytes) -> bool\n\n"
           "Removes the block from every tier (Redis: under the cache's prefix). True if any "
           "tier held it.")
      .def("clear", &PyCache::Clear,
           "clear() -> int\n\n"
           "Removes every block of this cache's layout from every tier and returns how many "
           "keys it erased. Blocks of other layouts in the same folder or Redis prefix are "
           "kept. In Redis: the keys the local tiers held, then every other value under the "
           "prefix whose header carries this layout's signature, whoever stored it (SCAN of "
           "every master).")
      .def("prometheus", &PyCache::Prometheus,
           "prometheus() -> str\n\n"
           "The counters of stats() as Prometheus text (kvtier_cache_*, kvtier_host_*, "
           "kvtier_disk_*, kvtier_remote_*), each family with its # HELP and # TYPE line.")
      .def("flush", &PyCache::Flush,
           "Writes dirty RAM entries down to the disk tier and waits for the writes.")
      .def("stats", &PyCache::Stats, "Counters of every tier as a dict (CacheStats JSON).")
      .def("close", &PyCache::Close,
           "Writes dirty entries down and closes the tiers. Later calls raise "
           "kvtier.FailedPrecondition. Idempotent.")
      .def_property_readonly("closed", &PyCache::closed)
      .def_property_readonly("layout", &PyCache::layout, "The cache's kvtier.Layout.")
      .def(
          "__enter__", [](PyCache& self) -> PyCache& { return self; },
          py::return_value_policy::reference)
      .def(
          "__exit__", [](PyCache& c, PyAny, PyAny, PyAny) { c.Close(); }, py::arg("exc_type"),
          py::arg("exc"), py::arg("tb"));
}

}  // namespace kvtier::python
