"""kvtier as an SGLang HiCache storage backend (L3), loaded dynamically.

Start SGLang with::

    --enable-hierarchical-cache --hicache-mem-layout page_first \\
    --hicache-storage-backend dynamic \\
    --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
        "module_path": "kvtier.integrations.sglang", "class_name": "KvtierHiCacheStorage",
        "interface_v1": 1, "disk_dir": "/var/cache/kvtier-sglang", "host_bytes": "4GiB"}'

Besides SGLang's own keys (``backend_name``, ``module_path``, ``class_name``,
``interface_v1``, ``tp_lcm_size``) the extra config takes the options of
``kvtier.Cache`` by their names (docs/options.md), checked by the same parser:
an unknown key or a bad value raises ``kvtier.InvalidArgument`` when SGLang
creates the backend. ``layout``, ``block_tokens`` and ``key_shard`` come from
SGLang's host pool and parallel position and are refused. ``disk_dir``
defaults to ``$XDG_CACHE_HOME/kvtier/sglang`` (created 0700; ``null``: RAM
only), ``host_bytes`` to 1 GiB (per registered host pool). With ``server``
("unix:PATH") the caches are clients of the host's ``kvtier serve``, which
owns the tiers (``host_bytes``, ``disk_dir`` and ``remote`` are then refused;
kvtier.integrations._served).

What never raises: every call SGLang makes on its prefetch, prefetch-io,
backup and scheduler threads (exists, get, set and their batch, v1 and v2
forms, ``get_stats``, ``clear``, ``close``). A failure there is a miss
(False, 0, None) and a log line on ``logging.getLogger("kvtier")``: SGLang
never restarts those threads, so an exception would end offloading for the
server's life. What raises: creating the backend and registering a host
pool it cannot store (a clear ``kvtier.InvalidArgument`` naming the pool),
so that the server fails to start instead of running without L3.

Pages and keys: see _sglang_pages (a page's regions from the pool's
``get_page_buffer_meta``, whatever their number and sizes, are one block).
SGLang names a page by a string; its kvtier key is
``SHA-256("kvtier-sglang-page-v1\\0" || namespace || UTF-8 page key)``, the
namespace being kvtier's (DESIGN.md §3) of the model, the pool's layout
signature, ``page_size`` tokens and the shard
``tp=<rank>/<size>;pp=<rank>/<size>;cp=<rank>/<size>`` (a field of size 1 left
out; no ``tp`` for the KV, indexer and draft pools of a rank-replicated (MLA)
model, whose pages are the same on every rank, but ``tp`` for its TP-sharded
side pools (Mamba state); with split heads the tp rank and size are those of
the head slice at ``tp_lcm_size``).

Fork: a backend used in a process other than the one that opened it reopens
its kvtier caches there (on the same folder and Redis) and logs it once.

The class: ``KvtierHiCacheStorage`` is looked up through this module's
``__getattr__``, so it subclasses SGLang's ``HiCacheStorage`` whenever
``sglang.srt.mem_cache.hicache_storage`` is loaded at lookup time (it is when
SGLang's backend factory looks it up), whatever the import order.
"""

import os
import sys
import threading

from kvtier.integrations._sglang_backend import SglangBackend, cache_options, default_disk_dir

_SGLANG_STORAGE_MODULE = "sglang.srt.mem_cache.hicache_storage"
_CLASS_NAME = "KvtierHiCacheStorage"
_classes = {}  # id(HiCacheStorage) -> the subclass made for it
_classes_lock = threading.Lock()

__all__ = [_CLASS_NAME, "SglangBackend", "default_disk_dir", "cache_options"]


def _hicache_storage_base():
    module = sys.modules.get(_SGLANG_STORAGE_MODULE)
    base = getattr(module, "HiCacheStorage", None) if module is not None else None
    return base if isinstance(base, type) else None


def storage_class():
    """KvtierHiCacheStorage for the HiCacheStorage loaded now (a plain class
    with the same methods when SGLang's module is not loaded)."""
    base = _hicache_storage_base()
    if base is None:
        return SglangBackend
    with _classes_lock:
        cls = _classes.get(id(base))
        if cls is None or cls.__bases__[1] is not base:
            cls = type(_CLASS_NAME, (SglangBackend, base),
                       {"__module__": __name__, "__doc__": SglangBackend.__doc__})
            _classes[id(base)] = cls
        return cls


def _reset_lock_in_child():
    global _classes_lock
    _classes_lock = threading.Lock()  # another thread may have held it at fork time


os.register_at_fork(after_in_child=_reset_lock_in_child)


def __getattr__(name):
    # PEP 562: runs on every lookup of the class, so the factory's
    # getattr(module, class_name) sees SGLang's base class even when this
    # module was imported before SGLang's hicache_storage.
    if name == _CLASS_NAME:
        return storage_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

