"""vLLM's current offloading interface (0.26 and later) as the kvtier vLLM
backend's tests see it: stand-ins of vllm/v1/kv_offload/base.py, config.py
and tiering/base.py written from the names and signatures recorded below
(SOURCES: path and commit of each), and drivers that make the connector's
scheduler and worker calls in their order.

Nothing here is vLLM's code. With KVTIER_VLLM_SRC naming a folder that holds
vLLM's own files (the drive: /work/scratch-vllm, docs/vllm.md), `install`
imports those instead of the stand-ins.
"""

import abc
import dataclasses
import enum
import importlib
import os
import sys
import time
import types
from typing import Any

import numpy as np

# Where each name was read (repository vllm-project/vllm).
SOURCES = {
    "base": ("vllm/v1/kv_offload/base.py", "0105e232b7fa4e1b59ec87531f167c0443a5095d"),
    "config": ("vllm/v1/kv_offload/config.py", "006f89ace7ca5b01ba9e0fe9633029d8c4206dea"),
    "worker": ("vllm/distributed/kv_transfer/kv_connector/v1/offloading/worker.py",
               "0078e9d2b020be709d7d756877106fd1015ea4f4"),
    "fs_tier": ("vllm/v1/kv_offload/tiering/fs/manager.py",
                "0255eeaabf66661958ae72b1e85eebcdb39de2a5"),
    "example_tier": ("vllm/v1/kv_offload/tiering/example/manager.py",
                     "033af9c591f87ade2e713f2c6643361057e6a105"),
    "tier_factory": ("vllm/v1/kv_offload/tiering/factory.py",
                     "0411f953de014cc29c91aa7060d66f603bde6a54"),
    # The multi-tier code the tier drive ran (docs/vllm.md), from neuralmagic/vllm, a fork
    # that tracks vllm-project/vllm main: the newest tiering/base.py the index offers.
    "tiering": ("vllm/v1/kv_offload/tiering/{base,factory,manager,spec}.py (neuralmagic/vllm)",
                "017e9f4448b700e85ee16023287b025693c72b9e"),
    "metrics": ("vllm/backends/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py",
                "a8f1d79812aa51e1036eba41286879eb09bd1635"),
    # Newer tiering shapes (test_vllm_current.py's tier tests of each): the factory of
    # neuralmagic/vllm's backpressure branch (tip 0b736e0f, 2026-08-19), and a
    # tiering/base.py the index holds without naming its commit (index text 69756206310).
    "tiering_backpressure": ("vllm/v1/kv_offload/tiering/{base,factory}.py (neuralmagic/vllm "
                             "branch backpressure)",
                             "0b736e0f1481f55834cc2c4579baf7778f5579b0"),
    "tiering_chunks": ("vllm/v1/kv_offload/tiering/base.py (index text 69756206310)", ""),
    # How the connector's scheduler side takes lookup's answers (neuralmagic/vllm).
    "scheduler": ("vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py",
                  "017e9f4448b700e85ee16023287b025693c72b9e"),
}
# Facts the drivers follow (source key, fact).
FACTS = [
    ("scheduler", "_maximal_prefix_lookup: HIT counts; HIT_PENDING counts and defers; RETRY "
                  "does not count, defers, and the scan goes on; MISS ends it; a deferred "
                  "request (get_num_new_matched_tokens None) is asked again on a later step; "
                  "on_request_finished(req_context) once per request"),
    ("base", "OffloadKey = block hash + group index as 4 bytes big-endian"),
    ("base", "OffloadingManager: lookup(key, req_context) -> LookupResult; prepare_load, "
             "prepare_store, on_new_request abstract; every other method (keys, req_context)"),
    ("base", "GPULoadStoreSpec(block_ids int32, group_sizes, block_indices): ids ordered by "
             "group; block_indices[g] = index of the group's first GPU block"),
    ("base", "OffloadingSpec.__init__(config): extra_config, offload_prompt_only (default "
             "True), blocks_per_chunk = config.cache.blocks_per_chunk"),
    ("worker", "CanonicalKVCaches: per layer its refs (tensor_idx, page_size_bytes), "
               "group_data_refs[g] = the refs of the group's layers in layer order"),
    ("worker", "submit_store / submit_load return bool, asserted; get_finished: "
               "assert transfer_result.success"),
    ("fs_tier", "SecondaryTierManager(offloading_spec, primary_kv_view, tier_type, **config); "
                "slot bytes = primary_kv_view.strides[0], slot i at i * that; lookup -> "
                "LookupResult; get_finished_jobs -> JobResult(successful_keys on a partial "
                "load); drain_jobs; take_events"),
    ("tier_factory", "register_tier(tier_type, module_path, class_name); the tier config "
                     "minus 'type' goes to the class as keywords"),
    ("tiering", "get_tier_class(tier_config): a registered type, else getattr(import_module("
                "module_path), type); create_secondary_tier pops type and module_path and "
                "passes the rest as keywords; build_metric_definitions(tier_config) of the "
                "tier class joins the spec's"),
    ("tiering", "primary_kv_view = memoryview(numpy (num_blocks, row) int8 over the "
                "/dev/shm mmap); at shutdown the primary tier releases it and closes the "
                "mmap after every tier's shutdown()"),
    ("base", "OffloadingManager.get_stats() -> OffloadingConnectorStats | None; "
             "OffloadingSpec.build_metric_definitions(cls, extra_config) -> {name: "
             "Offloading{Counter,Gauge}Metadata(documentation, labelnames)}"),
    ("metrics", "OffloadingConnectorStats(data={types, data}): increase_counter(name, value, "
                "labelvalues), set_gauge(...); aggregate sums counters, keeps the last gauge; "
                "the Prometheus side asserts each name was declared by the spec and "
                "len(labelvalues) == len(labelnames)"),
    ("tiering_backpressure", "SecondaryTierManager.__init__(offloading_spec, primary_kv_view, "
                             "tier_type, backpressure_detector=None); create_secondary_tier "
                             "pops 'backpressure' (building a detector from it) and passes "
                             "backpressure_detector= to every tier, None when unconfigured; "
                             "'locality' stays in the tier's keywords (fs tier: "
                             "Locality(locality), 'LOCAL' or 'REMOTE')"),
    ("tiering_chunks", "TransferJob(job_id, keys, chunk_ids, is_promotion, req_context): "
                       "the primary slots are chunk_ids (block_ids before); JobResult(job_id, "
                       "success, successful_keys=None, transfer_time=None)"),
]


# --- vllm/v1/kv_offload/config.py ------------------------------------------------

@dataclasses.dataclass(frozen=True)
class OffloadingGroupConfig:
    tokens_per_block: int
    layer_names: tuple


@dataclasses.dataclass(frozen=True)
class OffloadingModelConfig:
    name: str
    dtype: str


@dataclasses.dataclass(frozen=True)
class OffloadingCacheConfig:
    tokens_per_hash: int
    blocks_per_chunk: int


@dataclasses.dataclass(frozen=True)
class OffloadingParallelConfig:
    rank: int
    world_size: int
    tp_size: int
    pp_size: int
    pcp_size: int
    dcp_size: int
    data_parallel_index: int
    is_parallelism_agnostic: bool


@dataclasses.dataclass(frozen=True)
class OffloadingConfig:
    groups: tuple
    worker_kv_bytes_per_block: int
    enable_kv_cache_events: bool
    extra_config: Any
    engine_id: str
    model: OffloadingModelConfig
    cache: OffloadingCacheConfig
    parallel: OffloadingParallelConfig
    replicated_layout: bool = False
    num_cpu_blocks: Any = None


# --- vllm/v1/kv_offload/base.py ---------------------------------------------------

def make_offload_key(block_hash, group_idx):
    return bytes(block_hash) + group_idx.to_bytes(4, "big", signed=False)


def get_offload_block_hash(key):
    return key[:-4]


def get_offload_group_idx(key):
    return int.from_bytes(key[-4:], "big", signed=False)


class Medium(enum.Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class Locality(enum.Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


@dataclasses.dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: Any = None


class LookupResult(enum.Enum):
    MISS = enum.auto()
    HIT = enum.auto()
    HIT_PENDING = enum.auto()
    RETRY = enum.auto()


@dataclasses.dataclass
class RequestOffloadingContext:
    policy: str = "chunk_level"


class LoadStoreSpec:
    pass


@dataclasses.dataclass
class PrepareStoreOutput:
    keys_to_store: list
    store_spec: LoadStoreSpec
    evicted_keys: list


@dataclasses.dataclass
class OffloadingEvent:
    keys: list
    medium: Medium
    removed: bool
    locality: Any = None
    ownership: Any = None
    removal_expected: bool = False


@dataclasses.dataclass(frozen=True)
class OffloadingMetricMetadata:
    documentation: str
    labelnames: tuple = ()


@dataclasses.dataclass(frozen=True)
class OffloadingCounterMetadata(OffloadingMetricMetadata):
    pass


@dataclasses.dataclass(frozen=True)
class OffloadingGaugeMetadata(OffloadingMetricMetadata):
    pass


class OffloadingManager(abc.ABC):
    @abc.abstractmethod
    def lookup(self, key, req_context):
        pass

    @abc.abstractmethod
    def prepare_load(self, keys, req_context):
        pass

    def touch(self, keys, req_context):
        return

    def complete_load(self, keys, req_context):
        return

    @abc.abstractmethod
    def prepare_store(self, keys, req_context):
        pass

    def complete_store(self, keys, req_context, success=True):
        return

    @abc.abstractmethod
    def on_new_request(self, req_context):
        pass

    def on_request_finished(self, req_context):
        return

    def take_events(self):
        return ()

    def reset_cache(self):
        return

    def get_stats(self):
        return None

    def shutdown(self):
        return


class GPULoadStoreSpec(LoadStoreSpec):
    def __init__(self, block_ids, group_sizes, block_indices):
        self.block_ids = np.array(block_ids, dtype=np.int32)
        assert sum(group_sizes) == len(block_ids)
        assert len(block_indices) == len(group_sizes)
        self.group_sizes = group_sizes
        self.block_indices = block_indices


@dataclasses.dataclass
class CanonicalKVCacheTensor:
    tensor: Any
    page_size_bytes: int


@dataclasses.dataclass
class CanonicalKVCacheRef:
    tensor_idx: int
    page_size_bytes: int
    mapping: Any = None


@dataclasses.dataclass
class CanonicalKVCaches:
    tensors: list
    group_data_refs: list


@dataclasses.dataclass
class TransferResult:
    job_id: int
    success: bool
    transfer_size: Any = None
    transfer_time: Any = None


class OffloadingWorker(abc.ABC):
    @abc.abstractmethod
    def submit_store(self, job_id, src_spec, dst_spec):
        pass

    @abc.abstractmethod
    def submit_load(self, job_id, src_spec, dst_spec):
        pass

    @abc.abstractmethod
    def get_finished(self):
        pass

    @abc.abstractmethod
    def wait(self, job_ids):
        pass

    def shutdown(self):
        return


class OffloadingSpec(abc.ABC):
    @classmethod
    def build_metric_definitions(cls, extra_config):
        return {}

    def __init__(self, config):
        self.config = config
        self.extra_config = config.extra_config
        self.offload_prompt_only = bool(self.extra_config.get("offload_prompt_only", True))
        self.tokens_per_block = tuple(g.tokens_per_block for g in config.groups)
        self.tokens_per_hash = config.cache.tokens_per_hash
        self.blocks_per_chunk = config.cache.blocks_per_chunk

    @abc.abstractmethod
    def get_manager(self):
        pass

    @abc.abstractmethod
    def get_worker(self, kv_caches):
        pass


# --- the connector's metrics.py ---------------------------------------------------

@dataclasses.dataclass
class OffloadingConnectorStats:
    data: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if "data" not in self.data:
            self.data = {"types": {}, "data": {}}

    def aggregate(self, other):
        for name, values in other.data["data"].items():
            kind = other.data["types"][name]
            self.data["types"].setdefault(name, kind)
            mine = self.data["data"].setdefault(name, {})
            for labels, value in values.items():
                mine[labels] = mine.get(labels, 0) + value if kind == "counter" else value
        return self

    def is_empty(self):
        return not self.data["data"]

    def increase_counter(self, name, value=1, labelvalues=()):
        self.data["types"].setdefault(name, "counter")
        values = self.data["data"].setdefault(name, {})
        values[labelvalues] = values.get(labelvalues, 0) + value

    def set_gauge(self, name, value, labelvalues=()):
        self.data["types"].setdefault(name, "gauge")
        self.data["data"].setdefault(name, {})[labelvalues] = value


def observe(definitions, payload):
    """What vLLM's Prometheus side checks of a payload (SOURCES["metrics"]):
    every name declared, as many label values as label names, numbers."""
    for name, values in payload.data["data"].items():
        assert name in definitions, name
        kind = payload.data["types"][name]
        expected = {"counter": "OffloadingCounterMetadata", "gauge": "OffloadingGaugeMetadata"}
        assert type(definitions[name]).__name__ == expected[kind], name
        for labels, value in values.items():
            assert len(labels) == len(definitions[name].labelnames), (name, labels)
            assert isinstance(value, (int, float)), (name, value)


# --- vllm/v1/kv_offload/tiering/base.py and factory.py ---------------------------

JobId = int


@dataclasses.dataclass
class JobMetadata:
    job_id: int
    keys: Any
    block_ids: Any
    is_promotion: bool
    req_context: ReqContext


@dataclasses.dataclass
class JobResult:
    job_id: int
    success: bool
    successful_keys: Any = None
    transfer_time: Any = None
    transfer_bytes: Any = None


class SecondaryTierManager(abc.ABC):
    def __init__(self, offloading_spec, primary_kv_view, tier_type):
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type

    @abc.abstractmethod
    def lookup(self, key, req_context):
        pass

    @abc.abstractmethod
    def submit_store(self, job_metadata):
        pass

    @abc.abstractmethod
    def submit_load(self, job_metadata):
        pass

    @abc.abstractmethod
    def get_finished_jobs(self):
        pass

    @abc.abstractmethod
    def on_new_request(self, req_context):
        pass

    @abc.abstractmethod
    def drain_jobs(self):
        pass

    def touch(self, keys, req_context):
        return

    def take_events(self):
        return ()

    def shutdown(self):
        return


class SecondaryTierFactory:
    _registry = {}

    @classmethod
    def register_tier(cls, tier_type, module_path, class_name):
        if tier_type in cls._registry:
            raise ValueError("Tier %r is already registered." % tier_type)
        cls._registry[tier_type] = lambda: getattr(importlib.import_module(module_path),
                                                   class_name)

    @classmethod
    def get_tier_class(cls, tier_config):
        tier_type = tier_config.get("type")
        if tier_type in cls._registry:
            return cls._registry[tier_type]()
        if tier_config.get("module_path") is None:
            raise ValueError("Unknown secondary tier type: %r" % tier_type)
        tier_cls = getattr(importlib.import_module(tier_config["module_path"]), tier_type)
        assert issubclass(tier_cls, SecondaryTierManager)
        return tier_cls

    @classmethod
    def create_secondary_tier(cls, tier_config, primary_kv_view, offloading_spec):
        tier_cls = cls.get_tier_class(tier_config)
        config = dict(tier_config)
        tier_type = config.pop("type")
        config.pop("module_path", None)
        return tier_cls(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
                        tier_type=tier_type, **config)


# The newer shapes (SOURCES "tiering_backpressure", "tiering_chunks").

def create_secondary_tier_with_backpressure(tier_config, primary_kv_view, offloading_spec,
                                            detector=None):
    """create_secondary_tier as the backpressure branch has it (the detector
    given, instead of built from the config's 'backpressure')."""
    factory = module("vllm.v1.kv_offload.tiering.factory").SecondaryTierFactory
    tier_cls = factory.get_tier_class(tier_config)
    config = dict(tier_config)
    tier_type = config.pop("type")
    config.pop("module_path", None)
    config.pop("backpressure", None)
    return tier_cls(offloading_spec=offloading_spec, primary_kv_view=primary_kv_view,
                    tier_type=tier_type, backpressure_detector=detector, **config)


@dataclasses.dataclass
class ChunkTransferJob:  # its TransferJob
    job_id: int
    keys: Any
    chunk_ids: Any
    is_promotion: bool
    req_context: ReqContext


# --- Installing the stand-ins ----------------------------------------------------

_BASE_NAMES = ("make_offload_key", "get_offload_block_hash", "get_offload_group_idx", "Medium",
               "Locality", "ReqContext", "LookupResult", "RequestOffloadingContext",
               "LoadStoreSpec", "PrepareStoreOutput", "OffloadingEvent", "OffloadingManager",
               "GPULoadStoreSpec", "CanonicalKVCacheTensor", "CanonicalKVCacheRef",
               "CanonicalKVCaches", "TransferResult", "OffloadingWorker", "OffloadingSpec",
               "OffloadingMetricMetadata", "OffloadingCounterMetadata", "OffloadingGaugeMetadata")
_CONFIG_NAMES = ("OffloadingGroupConfig", "OffloadingModelConfig", "OffloadingCacheConfig",
                 "OffloadingParallelConfig", "OffloadingConfig")
_TIER_NAMES = ("JobMetadata", "JobResult", "SecondaryTierManager")
METRICS_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics"
PACKAGES = ("vllm", "vllm.v1", "vllm.v1.kv_offload", "vllm.v1.kv_offload.tiering") + tuple(
    METRICS_MODULE.rsplit(".", n)[0] for n in range(5, 0, -1))


def stand_in_modules(base_overrides=None):
    """The stand-in modules, by name (base_overrides: names of base.py to
    replace, e.g. an earlier era's OffloadingSpec)."""
    here = globals()
    mods = {}
    for name in PACKAGES:
        mods[name] = types.ModuleType(name)
        mods[name].__path__ = []
    contents = {
        "vllm.v1.kv_offload.base": dict({n: here[n] for n in _BASE_NAMES},
                                        **(base_overrides or {})),
        "vllm.v1.kv_offload.config": {n: here[n] for n in _CONFIG_NAMES},
        "vllm.v1.kv_offload.tiering.base": {n: here[n] for n in _TIER_NAMES},
        "vllm.v1.kv_offload.tiering.factory": {"SecondaryTierFactory": SecondaryTierFactory},
        METRICS_MODULE: {"OffloadingConnectorStats": OffloadingConnectorStats},
    }
    for name, attrs in contents.items():
        mods[name] = types.ModuleType(name)
        mods[name].__dict__.update(attrs)
    return mods


def vllm_modules():
    return {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.")}


def swap_vllm(mods):
    """Replaces every vllm module with `mods`; returns the ones replaced."""
    old = vllm_modules()
    for k in old:
        del sys.modules[k]
    sys.modules.update(mods)
    return old


def reload_backend():
    module = sys.modules.get("kvtier.integrations.vllm")
    if module is None:
        return importlib.import_module("kvtier.integrations.vllm")
    return importlib.reload(module)


def install():
    """The current interface in sys.modules (vLLM's own files when
    KVTIER_VLLM_SRC is set, else the stand-ins) and the backend reloaded
    over it; returns (backend module, the vllm modules it replaced)."""
    src = os.environ.get("KVTIER_VLLM_SRC")
    if src:
        old = swap_vllm({})
        sys.path.insert(0, src)
        SecondaryTierFactory._registry.clear()
        for name in ("vllm.v1.kv_offload.base", "vllm.v1.kv_offload.config",
                     "vllm.v1.kv_offload.tiering.base", "vllm.v1.kv_offload.tiering.factory"):
            importlib.import_module(name)
    else:
        SecondaryTierFactory._registry.clear()
        old = swap_vllm(stand_in_modules())
    return reload_backend(), old


def uninstall(old):
    src = os.environ.get("KVTIER_VLLM_SRC")
    if src and src in sys.path:
        sys.path.remove(src)
    swap_vllm(old)
    if old:
        reload_backend()


def module(name):
    return sys.modules[name]


# --- Configuration and KV caches -------------------------------------------------

def offloading_config(extra, *, layers=(2,), tokens=4, chunk=2, heads=2, head_dim=8, itemsize=2,
                      tp=1, rank=0, replicated=False, model="numpy-llama-seed1"):
    """An OffloadingConfig: one group per entry of `layers` (layer count)."""
    cfg = module("vllm.v1.kv_offload.config")
    page = 2 * tokens * heads * head_dim * itemsize
    groups = tuple(cfg.OffloadingGroupConfig(
        tokens_per_block=tokens,
        layer_names=tuple("model.layers.%d.g%d.attn" % (i, g) for i in range(n)))
        for g, n in enumerate(layers))
    return cfg.OffloadingConfig(
        groups=groups, worker_kv_bytes_per_block=page * sum(layers),
        enable_kv_cache_events=True, extra_config=dict(extra), engine_id="engine-0",
        model=cfg.OffloadingModelConfig(name=model, dtype="float16"),
        cache=cfg.OffloadingCacheConfig(tokens_per_hash=tokens, blocks_per_chunk=chunk),
        parallel=_only_fields(cfg.OffloadingParallelConfig, dict(
            rank=rank, world_size=tp, tp_size=tp, pp_size=1, pcp_size=1, dcp_size=1,
            data_parallel_index=0, is_parallelism_agnostic=False,
            data_parallel_size=1, data_parallel_rank_local=None)),  # (the last two: 017e9f44)
        replicated_layout=replicated)


def _only_fields(cls, values):
    """cls(**values) with the fields this vLLM's dataclass has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def torch_device():
    """Where the "GPU" blocks live: KVTIER_TEST_TORCH_DEVICE (e.g. cuda, on a
    machine with a GPU), else the CPU."""
    return os.environ.get("KVTIER_TEST_TORCH_DEVICE", "cpu")


def layer_tensors(layers, num_blocks, tokens, heads, head_dim, seed, device=None):
    """Per layer a (2, num_blocks, tokens, heads, head_dim) float16 tensor
    (FlashAttention's shape) on `device` (default torch_device()), its
    values a function of seed."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((2, num_blocks, tokens, heads, head_dim), generator=g).half()
            .to(device or torch_device()) for _ in range(layers)]


def canonical(groups_tensors, split_kv):
    """CanonicalKVCaches over per-group lists of layer tensors: two refs per
    layer (K and V halves, each (num_blocks, page / 2) int8) when split_kv,
    else one (num_blocks, page) ref per layer over a block-major copy.
    Returns (caches, per group per layer the tensor whose bytes are the GPU
    blocks as (num_blocks, page))."""
    import torch
    b = module("vllm.v1.kv_offload.base")
    tensors, refs, pages = [], [], []
    for layers in groups_tensors:
        group_refs, group_pages = [], []
        for t in layers:
            n = t.shape[1]
            if split_kv:
                for half in (t[0], t[1]):
                    view = half.reshape(n, -1).view(torch.int8)
                    tensors.append(b.CanonicalKVCacheTensor(view, int(view.shape[1])))
                    group_refs.append(b.CanonicalKVCacheRef(len(tensors) - 1,
                                                            int(view.shape[1])))
                group_pages.append(lambda t=t, n=n: torch.cat(
                    [t[0].reshape(n, -1), t[1].reshape(n, -1)], 1).view(torch.int8))
            else:
                whole = t.transpose(0, 1).contiguous()  # (num_blocks, 2, ...): page = K | V
                view = whole.reshape(n, -1).view(torch.int8)
                tensors.append(b.CanonicalKVCacheTensor(view, int(view.shape[1])))
                group_refs.append(b.CanonicalKVCacheRef(len(tensors) - 1, int(view.shape[1])))
                group_pages.append(lambda view=view: view)
        refs.append(group_refs)
        pages.append(group_pages)
    return b.CanonicalKVCaches(tensors=tensors, group_data_refs=refs), pages


def gpu_bytes(pages, group, block_ids):
    """The bytes of these GPU blocks of one group, every layer in order."""
    import torch
    out = []
    for p in pages[group]:
        page = p()
        idx = torch.tensor(block_ids, dtype=torch.long, device=page.device)
        out.append(page.index_select(0, idx).cpu().numpy().tobytes())
    return b"".join(out)


def block_hash(i, salt=b""):
    import hashlib
    return hashlib.sha256(b"block-%d" % i + salt).digest()


# --- The connector's calls -------------------------------------------------------

class Connector:
    """The OffloadingConnector's scheduler calls (manager) and worker calls
    (worker) on one spec, in the order SOURCES["worker"] makes them; records
    what vLLM's asserts would stop on instead of stopping."""

    def __init__(self, spec, kv_caches):
        self.spec = spec
        self.manager = spec.get_manager()
        self.worker = spec.get_worker(kv_caches)
        self.jobs = 0
        self.failed = []
        self.results = []

    def _finish(self, job):
        self.worker.wait({job})
        for r in self.worker.get_finished():
            self.results.append(r)
            if not r.success:
                self.failed.append(r.job_id)

    def gpu_spec(self, groups):
        """groups: per group (GPU block ids, index of the first GPU block)."""
        b = module("vllm.v1.kv_offload.base")
        ids = [i for group_ids, _ in groups for i in group_ids]
        return b.GPULoadStoreSpec(ids, [len(g) for g, _ in groups], [s for _, s in groups])

    def lookup(self, keys, req="req-0", answers=None):
        """A new request's hit count as SOURCES["scheduler"]'s
        _maximal_prefix_lookup finds it: HIT counts, MISS ends the scan,
        RETRY (and HIT_PENDING) keep scanning and defer the request, which
        vLLM asks about again on a later step (here: once the manager says
        it has no pending work). `answers` collects each pass's results."""
        b = module("vllm.v1.kv_offload.base")
        ctx = b.ReqContext(req_id=req)
        self.manager.on_new_request(ctx)
        deadline = time.monotonic() + 300
        while True:
            hits, defer, seen = 0, False, []
            for key in keys:
                result = self.manager.lookup(key, ctx)
                seen.append(result.name)
                if result is b.LookupResult.MISS:
                    break
                defer |= result in (b.LookupResult.RETRY, b.LookupResult.HIT_PENDING)
                hits += result is not b.LookupResult.RETRY
            if answers is not None:
                answers.append(seen)
            if not defer:
                return hits
            assert time.monotonic() < deadline, "lookups deferred for 300 s"
            while getattr(self.manager, "has_pending_work", lambda: False)():
                time.sleep(0.001)  # vLLM's next scheduler step

    def prepare_load(self, keys, req="req-0"):
        b = module("vllm.v1.kv_offload.base")
        return self.manager.prepare_load(keys, b.ReqContext(req_id=req))

    def transfer_load(self, keys, src, groups, req="req-0"):
        b = module("vllm.v1.kv_offload.base")
        job = self.jobs
        self.jobs += 1
        before = len(self.failed)
        assert self.worker.submit_load(job, src, self.gpu_spec(groups))
        self._finish(job)
        self.manager.complete_load(keys, b.ReqContext(req_id=req))
        return len(self.failed) == before

    def load(self, keys, groups, req="req-0"):
        return self.transfer_load(keys, self.prepare_load(keys, req), groups, req)

    def store(self, keys, groups, req="req-0"):
        """prepare_store, the worker's submit_store, complete_store; the keys
        stored."""
        b = module("vllm.v1.kv_offload.base")
        ctx = b.ReqContext(req_id=req)
        out = self.manager.prepare_store(keys, ctx)
        if out is None or not out.keys_to_store:
            return [] if out is not None else None
        job = self.jobs
        self.jobs += 1
        before = len(self.failed)
        assert self.worker.submit_store(job, self.gpu_spec(groups), out.store_spec)
        self._finish(job)
        self.manager.complete_store(out.keys_to_store, ctx)
        assert len(self.failed) == before, "a failed store job stops vLLM"
        return list(out.keys_to_store)

    def events(self):
        return list(self.manager.take_events())
