"""kvtier as a vLLM offloading backend (vLLM's OffloadingConnector).

Start vLLM with (docs/vllm.md has the details)::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both", "kv_connector_extra_config": {"spec_name": "KvtierOffloadingSpec",
        "spec_module_path": "kvtier.integrations.vllm", "disk_dir": "/var/cache/kvtier-vllm",
        "host_bytes": "4GiB"}}'

The interface vLLM offers decides the route, checked when this module is
imported (from the names present, not from a version string):

- the current route (vLLM 0.26 and later: ``vllm/v1/kv_offload/base.py``
  with ``OffloadingWorker``, ``OffloadKey``, ``LookupResult``, ``Medium`` and
  ``OffloadingSpec(config: OffloadingConfig)``): _offload_route, and the
  multi-tier route, kvtier as a secondary tier under vLLM's CPU tier
  (``vllm/v1/kv_offload/tiering/base.py``): _tier_route;
- the handler route (vLLM 0.14-0.19: ``abstract.py``, ``spec.py``,
  ``worker/worker.py`` with ``OffloadingHandler``): _handler_route;
- no vLLM at all: the handler route over stand-in base classes (for tests
  and tools);
- anything else (vLLM 0.20-0.25, between the two) is refused here with one
  line naming what is missing and the supported range.
"""

import importlib
import inspect
import sys

from . import _common
from ._common import _caches, shared_cache  # noqa: F401

SUPPORTED = ("vLLM 0.26 and later (kv_offload/base.py with OffloadingWorker and "
             "OffloadingSpec(config)), or vLLM 0.14-0.19 (kv_offload/worker/worker.py with "
             "OffloadingHandler)")
# The current interface: (module, name) kvtier needs.
CURRENT_NEEDS = tuple(("vllm.v1.kv_offload.base", n) for n in (
    "OffloadingSpec", "OffloadingManager", "OffloadingWorker", "LoadStoreSpec",
    "PrepareStoreOutput", "OffloadingEvent", "LookupResult", "Medium", "TransferResult",
    "GPULoadStoreSpec", "RequestOffloadingContext", "get_offload_block_hash",
    "get_offload_group_idx")) + (("vllm.v1.kv_offload.config", "OffloadingConfig"),)
HANDLER_NEEDS = (("vllm.v1.kv_offload.abstract", "OffloadingManager"),
                 ("vllm.v1.kv_offload.worker.worker", "OffloadingHandler"),
                 ("vllm.v1.kv_offload.spec", "OffloadingSpec"))


def _params(fn):
    try:
        return [p for p in inspect.signature(fn).parameters if p != "self"]
    except (TypeError, ValueError):
        return None


def _missing(needs):
    return ["%s.%s" % need for need in needs if _common.vllm_attr(*need) is None]


def detect_route():
    """("current" | "handler" | "standalone", None) for the interface
    present, or (None, the one-line refusal)."""
    try:
        importlib.import_module("vllm")
    except ImportError:
        return "standalone", None
    missing = _missing(CURRENT_NEEDS)
    if not missing:
        init = _params(_common.vllm_attr("vllm.v1.kv_offload.base", "OffloadingSpec").__init__)
        if init == ["config"]:
            return "current", None
        missing = ["OffloadingSpec.__init__(self, config) (it takes %s)" % init]
    if not _missing(HANDLER_NEEDS):
        lookup = _common.vllm_attr("vllm.v1.kv_offload.abstract", "OffloadingManager").lookup
        if _params(lookup) == ["block_hashes"]:
            return "handler", None
        missing.append("OffloadingManager.lookup(self, block_hashes) (it takes %s)"
                       % _params(lookup))
    return None, ("kvtier.integrations.vllm: this vLLM's offloading interface is not one "
                  "kvtier supports: missing %s; supported: %s"
                  % (", ".join(missing[:4]) + (" ..." if len(missing) > 4 else ""), SUPPORTED))


def _submodule(name):
    """Imports (or, when this package is reloaded over another vLLM,
    reloads) one route module."""
    full = __name__ + "." + name
    module = sys.modules.get(full)
    return importlib.reload(module) if module is not None else importlib.import_module(full)


ROUTE, _refusal = detect_route()
if ROUTE is None:
    raise ImportError(_refusal)
_route_modules = [_submodule("_offload_route"), _submodule("_tier_route")] \
    if ROUTE == "current" else [_submodule("_handler_route")]
for _module in _route_modules:
    globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})
del _module
