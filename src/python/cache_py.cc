// kvtier.Cache: a TieredCache (RAM over an optional disk folder) for Python
// engines (DESIGN.md §8). Byte buffers cross through the buffer protocol;
// every call that may wait on a lock, a copy or the disk releases the GIL
// (also because the tiers' threads take it to log, python/logger_py.h).
//
// A call takes its own reference to the TieredCache, so close() from
// another thread cannot free it under a running call (TieredCache::Close
// waits for calls in progress; later calls get kvtier.FailedPrecondition).
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings/cache_spec.h"
#include "kvtier/block_file.h"
#include "kvtier/tiered_cache.h"
#include "python/codec_py.h"
#include "python/convert.h"
#include "python/errors.h"
#include "python/logger_py.h"
#include "python/register.h"

namespace kvtier::python {
namespace {

std::optional<std::string> OptionalPath(py::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  if (PyUnicode_Check(obj.ptr())) return obj.cast<std::string>();
  if (py::hasattr(obj, "__fspath__")) {
    py::object path = obj.attr("__fspath__")();
    if (PyUnicode_Check(path.ptr())) return path.cast<std::string>();
  }
  ThrowInvalid(std::string(what) + ": expected a str path or None, got " + TypeName(obj));
}

uint64_t PositiveInt(py::handle obj, const char* what) {
  if (!PyLong_Check(obj.ptr()) || PyBool_Check(obj.ptr())) {
    ThrowInvalid(std::string(what) + ": expected an int, got " + TypeName(obj));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(obj.ptr());
    if (PyErr_Occurred() != nullptr) {
      PyErr_Clear();
      ThrowInvalid(std::string(what) + ": " + std::string(py::str(obj)) + " does not fit 64 bits");
    }
    return u;
  }
  if (overflow < 0 || v <= 0) {
    ThrowInvalid(std::string(what) + ": must be > 0, got " + std::string(py::str(obj)));
  }
  return static_cast<uint64_t>(v);
}

class PyCache {
 public:
  PyCache(py::handle layout, py::handle host_bytes, py::handle disk_dir, py::handle remote,
          uint32_t block_tokens) {
    bindings::CacheSpec spec;
    spec.host_bytes = PositiveInt(host_bytes, "host_bytes");
    spec.disk_dir = OptionalPath(disk_dir, "disk_dir");
    if (!remote.is_none()) {
      if (!PyUnicode_Check(remote.ptr())) {
        ThrowInvalid("remote: expected a Redis URL str or None, got " + TypeName(remote));
      }
      spec.remote = remote.cast<std::string>();
    }
    spec.info_log = PythonLog();
    ModelLayout resolved = LayoutFromPy(layout, "layout", block_tokens);
    Result<bindings::OpenedCache> opened = [&] {
      py::gil_scoped_release release;
      return bindings::OpenCacheForLayout(std::move(resolved), spec);
    }();
    if (!opened.ok()) Throw(opened.status());
    layout_ = std::move(opened->layout);
    signature_ = layout_.Signature();
    cache_ = std::move(opened->cache);
  }

  // Closes an unclosed cache with the GIL released: its threads may be
  // logging (they take the GIL) while the tiers join them.
  ~PyCache() {
    if (cache_ == nullptr) return;
    py::gil_scoped_release release;
    cache_.reset();
  }
  PyCache(const PyCache&) = delete;
  PyCache& operator=(const PyCache&) = delete;

  void Store(py::handle key, py::handle block) {
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

  void StoreTensors(py::handle key, py::handle parent, py::handle ns, py::handle tensors,
                    uint32_t token_count, std::optional<int64_t> created_at) {
    const BlockKey k = KeyFromPy(key, "key");
    const BlockKey p = KeyFromPy(parent, "parent");
    const BlockKey n = KeyFromPy(ns, "namespace");
    std::shared_ptr<TieredCache> cache = Live("store_tensors");
    Result<BlockBuffer> block = EncodeFromPy(layout_, k, p, n, tensors, token_count, created_at);
    Status s;
    {
      py::gil_scoped_release release;
      s = StoreBuffer(*cache, k, std::move(block));
    }
    ThrowIfError(s);
  }

  size_t Match(py::handle keys) {
    const std::vector<BlockKey> chain = KeysFromPy(keys, "keys");
    std::shared_ptr<TieredCache> cache = Live("match");
    py::gil_scoped_release release;
    return cache->Match(chain).blocks;
  }

  size_t LoadInto(py::handle key, py::handle out) {
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

  py::object Load(py::handle key) {
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

  bool LoadTensors(py::handle key, py::handle outs) {
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

  void Flush() {
    std::shared_ptr<TieredCache> cache = Live("flush");
    Status s;
    {
      py::gil_scoped_release release;
      s = cache->Flush();
    }
    ThrowIfError(s);
  }

  py::object Stats() {
    std::shared_ptr<TieredCache> cache = Live("stats");
    std::string json;
    {
      py::gil_scoped_release release;
      json = cache->Stats().ToJson();
    }
    return py::module_::import("json").attr("loads")(json);
  }

  void Close() {
    std::shared_ptr<TieredCache> cache = std::move(cache_);
    cache_.reset();
    if (cache == nullptr) return;
    Status s;
    {
      py::gil_scoped_release release;
      s = cache->Close();
      cache.reset();
    }
    ThrowIfError(s);
  }

  bool closed() const { return cache_ == nullptr; }
  const ModelLayout& layout() const { return layout_; }

 private:
  std::shared_ptr<TieredCache> Live(const char* fn) const {
    if (cache_ == nullptr) {
      Throw(Status::FailedPrecondition(std::string("Cache.") + fn + ": the cache is closed"));
    }
    return cache_;
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
  std::shared_ptr<TieredCache> cache_;  // null once closed; guarded by the GIL
};

}  // namespace

void RegisterCache(py::module_& m) {
  py::class_<PyCache>(m, "Cache",
                      "Blocks by key in RAM over an optional disk folder and an optional Redis "
                      "server (kvtier.Cache(layout, host_bytes=..., disk_dir=..., remote=...)). A "
                      "miss is None / 0, not an error. Use it "
                      "as a context manager or call close().")
      .def(py::init<py::handle, py::handle, py::handle, py::handle, uint32_t>(), py::arg("layout"),
           py::kw_only(), py::arg("host_bytes"), py::arg("disk_dir") = py::none(),
           py::arg("remote") = py::none(), py::arg("block_tokens") = 0,
           "layout: a preset name, a layout JSON path or a kvtier.Layout; host_bytes: the RAM "
           "budget; disk_dir: a folder for the disk tier (created if missing), None for RAM "
           "only; remote: a Redis URL (redis://host:port or redis-cluster://host:port,...) "
           "for the remote tier shared by every host using it, None for none; block_tokens > 0 "
           "overrides the layout's.")
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
      .def("flush", &PyCache::Flush,
           "Writes dirty RAM entries down to the disk tier and waits for the writes.")
      .def("stats", &PyCache::Stats, "Counters of every tier as a dict (CacheStats JSON).")
      .def("close", &PyCache::Close,
           "Writes dirty entries down and closes the tiers. Later calls raise "
           "kvtier.FailedPrecondition. Idempotent.")
      .def_property_readonly("closed", &PyCache::closed)
      .def_property_readonly("layout", &PyCache::layout, "The cache's kvtier.Layout.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyCache& c, py::handle, py::handle, py::handle) { c.Close(); });
}

}  // namespace kvtier::python
