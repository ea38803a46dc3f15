"""vLLM as the kvtier vLLM backend's tests see it: the facts read from vLLM's
source (TABLE, CALLS), a stand-in `vllm` package built to them, vLLM's block
hashing, and a driver that makes the OffloadingConnector's calls in its order.

Nothing here is vLLM's code: the classes are written from the recorded
signatures and the driver from the recorded call sequence (path and commit of
each fact in SOURCES). test_vllm.py checks the stand-ins and the backend
against the table.
"""

import abc
import dataclasses
import hashlib
import importlib
import os
import pickle
import sys
import threading
import types

import numpy as np

# Where each fact was read (repository vllm-project/vllm).
SOURCES = {
    "connector": ("vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py",
                  "7368908123b14495cca88daf580cbc07c384d5b3"),
    "abstract": ("vllm/v1/kv_offload/abstract.py", "00d169bfa55967fc48d6f1b08cfc929c1cce3545"),
    "worker": ("vllm/v1/kv_offload/worker/worker.py", "06bb4a63a14b5b1f34ad9455e8e4aa017ee6e0f3"),
    "spec": ("vllm/v1/kv_offload/spec.py", "0072b0b7443bdddf17824c78d4feae8e1fc12fb4"),
    "factory": ("vllm/v1/kv_offload/factory.py", "07b13497a9b52274d334090a9a8e04d5ec9ca7e9"),
    "mediums": ("vllm/v1/kv_offload/mediums.py", "0c2bbc477d0d615ee4d2581bbdfa966054db20f0"),
    "hashing": ("vllm/utils/hashing.py", "ac621345a4eb18058bb24b242b457f634d476b40"),
    "kv_cache_utils": ("vllm/v1/core/kv_cache_utils.py",
                       "bbf906a88ba1a39104884c88c9811a4f968e4659"),
    "new_worker": ("vllm/distributed/kv_transfer/kv_connector/v1/offloading/worker.py",
                   "0078e9d2b020be709d7d756877106fd1015ea4f4"),
}

REQUIRED = object()  # a parameter without a default

# Declared signatures: (module, class, method) -> (parameters after self or
# cls as (name, default), static?, abstract?, source).
TABLE = {
    ("vllm.v1.kv_offload.abstract", "LoadStoreSpec", "medium"): ((), True, True, "abstract"),
    ("vllm.v1.kv_offload.abstract", "OffloadingManager", "lookup"):
        ((("block_hashes", REQUIRED),), False, True, "abstract"),
    ("vllm.v1.kv_offload.abstract", "OffloadingManager", "prepare_load"):
        ((("block_hashes", REQUIRED),), False, True, "abstract"),
    ("vllm.v1.kv_offload.abstract", "OffloadingManager", "touch"):
        ((("block_hashes", REQUIRED),), False, False, "abstract"),
    ("vllm.v1.kv_offload.abstract", "OffloadingManager", "complete_load"):
        ((("block_hashes", REQUIRED),), False, False, "abstract"),
    ("vllm.v1.kv_offload.abstract", "OffloadingManager", "prepare_store"):
        ((("block_hashes", REQUIRED),), False, True, "abstract"),
    ("vllm.v1.kv_offload.abstract", "OffloadingManager", "complete_store"):
        ((("block_hashes", REQUIRED), ("success", True)), False, False, "abstract"),
    ("vllm.v1.kv_offload.abstract", "OffloadingManager", "take_events"):
        ((), False, False, "abstract"),
    ("vllm.v1.kv_offload.worker.worker", "OffloadingHandler", "transfer_async"):
        ((("job_id", REQUIRED), ("spec", REQUIRED)), False, True, "worker"),
    ("vllm.v1.kv_offload.worker.worker", "OffloadingHandler", "get_finished"):
        ((), False, True, "worker"),
    ("vllm.v1.kv_offload.worker.worker", "OffloadingHandler", "wait"):
        ((("job_ids", REQUIRED),), False, True, "worker"),
    ("vllm.v1.kv_offload.worker.worker", "OffloadingHandler", "shutdown"):
        ((), False, False, "worker"),
    ("vllm.v1.kv_offload.spec", "OffloadingSpec", "__init__"):
        ((("vllm_config", REQUIRED), ("kv_cache_config", REQUIRED)), False, False, "spec"),
    ("vllm.v1.kv_offload.spec", "OffloadingSpec", "get_manager"): ((), False, True, "spec"),
    ("vllm.v1.kv_offload.spec", "OffloadingSpec", "get_handlers"):
        ((("kv_caches", REQUIRED),), False, True, "spec"),
}

# Dataclass fields: (module, class) -> (fields as (name, default), source).
FIELDS = {
    ("vllm.v1.kv_offload.abstract", "PrepareStoreOutput"):
        ((("block_hashes_to_store", REQUIRED), ("store_spec", REQUIRED),
          ("block_hashes_evicted", REQUIRED)), "abstract"),
    ("vllm.v1.kv_offload.abstract", "OffloadingEvent"):
        ((("block_hashes", REQUIRED), ("block_size", REQUIRED), ("medium", REQUIRED),
          ("removed", REQUIRED)), "abstract"),
}

# How the connector (SOURCES["connector"]) and the factory call the spec,
# manager and handler: (class, method) -> list of (positional count,
# keyword names) call shapes, and what it does with the result.
CALLS = {
    ("OffloadingSpec", "__init__"): [(2, (), "factory", "spec_cls(config)"),
                                     (3, (), "spec", "create_spec(vllm_config, kv_cache_config)")],
    ("OffloadingSpec", "get_manager"): [(0, (), "connector", "scheduler __init__")],
    ("OffloadingSpec", "get_handlers"): [
        (2, (), "connector", "get_handlers(kv_caches, attn_backends): yields "
         "(src_cls, dst_cls, handler), registered by (src.medium(), dst.medium())"),
        (1, (), "spec", "get_handlers(kv_caches: CanonicalKVCaches)")],
    ("OffloadingManager", "touch"): [(1, (), "connector", "every offloaded hash of a request")],
    ("OffloadingManager", "lookup"): [(1, (), "connector", "-> int, leading hits from start")],
    ("OffloadingManager", "prepare_load"): [(1, (), "connector", "-> src LoadStoreSpec")],
    ("OffloadingManager", "prepare_store"): [
        (1, (), "connector", "-> None (warn, skip) or .block_hashes_to_store, .store_spec")],
    ("OffloadingManager", "complete_store"): [(1, (), "connector", "finished_sending, preempted")],
    ("OffloadingManager", "complete_load"): [(1, (), "connector", "finished_recving")],
    ("OffloadingManager", "take_events"): [
        (0, (), "connector", "event.removed -> BlockRemoved(block_hashes, medium) else "
         "BlockStored(block_hashes, block_size, medium, ...)")],
    ("OffloadingHandler", "transfer_async"): [
        (2, (), "connector", "job_id, (src_spec, dst_spec); worker catches Exception -> False; "
         "connector asserts success")],
    ("OffloadingHandler", "get_finished"): [
        (0, (), "connector", "for job_id, success in ...: assert success")],
    ("OffloadingHandler", "wait"): [(1, (), "connector", "handle_preemptions(job_ids)")],
}

# Other facts the backend relies on (source key, fact).
FACTS = [
    ("factory", "spec_name from kv_connector_extra_config (default CPUOffloadingSpec); unknown "
                "names: importlib.import_module(spec_module_path), getattr(spec_name), "
                "assert issubclass(spec_cls, OffloadingSpec)"),
    ("spec", "extra_config = kv_transfer_config.kv_connector_extra_config; 'block_size' there "
             "is the offloaded block size, a multiple of every GPU block size"),
    ("connector", "block_size_factor = offloaded_block_size // gpu_block_size; the manager "
                  "sees request.block_hashes[factor*i + factor - 1], one per offloaded block"),
    ("connector", "a store job's GPU block ids: factor ids per hash in block_hashes_to_store, "
                  "in order; a load's GPU ids start after the GPU-cached blocks, so the first "
                  "offloaded block may be partly on the GPU already"),
    ("connector", "stores are submitted at the start of the next step; the worker calls "
                  "transfer_async, get_finished and wait from the model runner's thread"),
    ("connector", "a failed job (transfer_async False, success False) fails an assert: "
                  "vLLM does not recompute it"),
    ("new_worker", "the later connector worker also asserts transfer_result.success"),
    ("worker", "OffloadingWorker.transfer_async logs and returns False when a handler raises"),
    ("mediums", "GPULoadStoreSpec.medium() == 'GPU'; block_ids an int64 numpy array"),
    ("hashing", "sha256: SHA-256 of pickle.dumps(obj, HIGHEST_PROTOCOL); sha256_cbor: "
                "SHA-256 of cbor2.dumps(obj, canonical=True); other names raise ValueError"),
    ("kv_cache_utils", "block hash = hash_fn((parent hash or NONE_HASH, tuple(token ids), "
                       "extra keys or None)); NONE_HASH from PYTHONHASHSEED, else "
                       "os.urandom(32); extra keys: LoRA, multimodal hashes, cache_salt"),
]


# --- The stand-in vllm package ------------------------------------------------

class LoadStoreSpec(abc.ABC):
    @staticmethod
    @abc.abstractmethod
    def medium():
        pass


@dataclasses.dataclass
class PrepareStoreOutput:
    block_hashes_to_store: list
    store_spec: LoadStoreSpec
    block_hashes_evicted: list


@dataclasses.dataclass
class OffloadingEvent:
    block_hashes: list
    block_size: int
    medium: str
    removed: bool


class OffloadingManager(abc.ABC):
    @abc.abstractmethod
    def lookup(self, block_hashes):
        pass

    @abc.abstractmethod
    def prepare_load(self, block_hashes):
        pass

    def touch(self, block_hashes):
        return

    def complete_load(self, block_hashes):
        return

    @abc.abstractmethod
    def prepare_store(self, block_hashes):
        pass

    def complete_store(self, block_hashes, success=True):
        return

    def take_events(self):
        return ()


class OffloadingHandler(abc.ABC):
    @abc.abstractmethod
    def transfer_async(self, job_id, spec):
        pass

    @abc.abstractmethod
    def get_finished(self):
        pass

    @abc.abstractmethod
    def wait(self, job_ids):
        pass

    def shutdown(self):
        pass


class OffloadingWorker:
    """Routes transfers to handlers by (src medium, dst medium)."""

    def __init__(self):
        self.handlers = set()
        self.by_type = {}

    def register_handler(self, src_cls, dst_cls, handler):
        route = (src_cls.medium(), dst_cls.medium())
        assert route not in self.by_type
        self.handlers.add(handler)
        self.by_type[route] = handler

    def transfer_async(self, job_id, spec):
        src, dst = spec
        handler = self.by_type[(src.medium(), dst.medium())]
        try:
            return handler.transfer_async(job_id, spec)
        except Exception:
            return False

    def get_finished(self):
        out = []
        for handler in self.handlers:
            out.extend(handler.get_finished())
        return out

    def wait(self, job_ids):
        for handler in self.handlers:
            handler.wait(job_ids)


class OffloadingSpec(abc.ABC):
    def __init__(self, vllm_config, kv_cache_config):
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        self.extra_config = vllm_config.kv_transfer_config.kv_connector_extra_config
        self.gpu_block_size = vllm_config.cache_config.block_size
        self.offloaded_block_size = int(self.extra_config.get("block_size",
                                                              self.gpu_block_size))
        assert self.offloaded_block_size % self.gpu_block_size == 0

    @abc.abstractmethod
    def get_manager(self):
        pass

    @abc.abstractmethod
    def get_handlers(self, kv_caches):
        pass


class GPULoadStoreSpec(LoadStoreSpec):
    def __init__(self, block_ids):
        self.block_ids = np.array(block_ids, dtype=np.int64)

    @staticmethod
    def medium():
        return "GPU"


class OffloadingSpecFactory:
    @classmethod
    def create_spec(cls, config, kv_cache_config):
        extra = config.kv_transfer_config.kv_connector_extra_config
        name = extra.get("spec_name", "CPUOffloadingSpec")
        module_path = extra.get("spec_module_path")
        if module_path is None:
            raise ValueError("Unsupported spec type: %s" % name)
        spec_cls = getattr(importlib.import_module(module_path), name)
        assert issubclass(spec_cls, installed("vllm.v1.kv_offload.spec", "OffloadingSpec"))
        return spec_cls(config, kv_cache_config)


def installed(module, name):
    """`module.name` of the vllm installed (vLLM's own files or the stand-ins)."""
    return getattr(sys.modules[module], name)


def gpu_spec(block_ids):
    """vLLM's GPULoadStoreSpec of one KV cache group (later mediums.py files
    take group_sizes too)."""
    import inspect
    cls = installed("vllm.v1.kv_offload.mediums", "GPULoadStoreSpec")
    if "group_sizes" in inspect.signature(cls.__init__).parameters:
        return cls(block_ids, group_sizes=[len(block_ids)])
    return cls(block_ids)


def pairs(results):
    """(job_id, success) of get_finished's results (TransferResult or pairs)."""
    return [(r.job_id, r.success) if hasattr(r, "job_id") else tuple(r) for r in results]


def install_fake_vllm():
    """Registers the stand-in `vllm` modules (unless a vllm is importable) and
    returns kvtier.integrations.vllm loaded over them."""
    try:
        importlib.import_module("vllm")  # a real vLLM: the backend subclasses it
    except ImportError:
        mods = {}
        for name in ("vllm", "vllm.v1", "vllm.v1.kv_offload", "vllm.v1.kv_offload.worker"):
            mods[name] = types.ModuleType(name)
            mods[name].__path__ = []
        contents = {
            "vllm.v1.kv_offload.abstract": dict(
                LoadStoreSpec=LoadStoreSpec, PrepareStoreOutput=PrepareStoreOutput,
                OffloadingEvent=OffloadingEvent, OffloadingManager=OffloadingManager),
            "vllm.v1.kv_offload.worker.worker": dict(
                OffloadingHandler=OffloadingHandler, OffloadingWorker=OffloadingWorker),
            "vllm.v1.kv_offload.spec": dict(OffloadingSpec=OffloadingSpec),
            "vllm.v1.kv_offload.mediums": dict(GPULoadStoreSpec=GPULoadStoreSpec),
            "vllm.v1.kv_offload.factory": dict(OffloadingSpecFactory=OffloadingSpecFactory),
        }
        for name, attrs in contents.items():
            mods[name] = types.ModuleType(name)
            mods[name].__dict__.update(attrs)
        sys.modules.update(mods)
    module = sys.modules.get("kvtier.integrations.vllm")
    if module is not None and not issubclass(module.KvtierOffloadingSpec,
                                             sys.modules["vllm.v1.kv_offload.spec"]
                                             .OffloadingSpec):
        return importlib.reload(module)
    return importlib.import_module("kvtier.integrations.vllm")


# --- vLLM's configuration and block hashes --------------------------------------

def ns(**kw):
    return types.SimpleNamespace(**kw)


def vllm_config(extra, *, block_size=16, algo="sha256", tp=1, model="numpy-llama-seed1",
                use_mla=False, pp=1):
    return ns(kv_transfer_config=ns(kv_connector="OffloadingConnector",
                                    kv_connector_extra_config=dict(extra)),
              cache_config=ns(block_size=block_size, prefix_caching_hash_algo=algo),
              model_config=ns(model=model, revision=None, use_mla=use_mla),
              parallel_config=ns(tensor_parallel_size=tp, pipeline_parallel_size=pp, rank=0))


def kv_cache_config(layers, num_blocks, block_size, kv_heads, head_dim, dtype):
    import torch
    itemsize = torch.empty((), dtype=dtype).element_size()
    page = 2 * block_size * kv_heads * head_dim * itemsize
    spec = ns(block_size=block_size, page_size_bytes=page, dtype=dtype)
    return ns(num_blocks=num_blocks,
              kv_cache_groups=[ns(layer_names=["model.layers.%d.self_attn" % i
                                               for i in range(layers)], kv_cache_spec=spec)])


def none_hash(seed):
    """vLLM's chain seed with PYTHONHASHSEED=seed (SOURCES kv_cache_utils)."""
    return hashlib.sha256(pickle.dumps(seed, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def block_hashes(tokens, block_size, seed=None):
    """vLLM's sha256 block hashes (bytes) of the full blocks of `tokens`, with
    this process's PYTHONHASHSEED as vLLM seeds them."""
    out, parent = [], none_hash(os.environ["PYTHONHASHSEED"] if seed is None else seed)
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tuple(int(t) for t in tokens[start:start + block_size])
        parent = hashlib.sha256(pickle.dumps((parent, block, None),
                                             protocol=pickle.HIGHEST_PROTOCOL)).digest()
        out.append(parent)
    return out


# --- The connector's calls ------------------------------------------------------

class Connector:
    """The OffloadingConnector's scheduler and worker calls on one spec (the
    scheduler and worker in one process, as vLLM runs with one GPU), in the
    order SOURCES["connector"] makes them. Asserts what it asserts."""

    def __init__(self, spec, kv_caches, attn_backends=None):
        self.spec = spec
        # Later spec.py files keep a GPU block size per KV cache group.
        gpu_block_size = spec.gpu_block_size
        if isinstance(gpu_block_size, tuple):
            (gpu_block_size,) = gpu_block_size
        self.factor = spec.offloaded_block_size // gpu_block_size
        self.manager = spec.get_manager()
        self.worker = installed("vllm.v1.kv_offload.worker.worker", "OffloadingWorker")()
        for src, dst, handler in spec.get_handlers(kv_caches, attn_backends or {}):
            self.worker.register_handler(src, dst, handler)
        self.jobs = 0
        self.failed = []

    def offloaded_hashes(self, gpu_hashes):
        return gpu_hashes[self.factor - 1::self.factor]

    def _run(self, src, dst):
        job = self.jobs
        self.jobs += 1
        assert self.worker.transfer_async(job, (src, dst))
        self.worker.wait({job})
        results = self.worker.get_finished()
        for result in results:
            job_id, success = (result.job_id, result.success) if hasattr(result, "job_id") \
                else result
            if not success:
                self.failed.append(job_id)
        return [r for r in results]

    def matched_blocks(self, gpu_hashes, gpu_computed_blocks=0):
        """get_num_new_matched_tokens: offloaded blocks to load after the GPU
        prefix cache's blocks."""
        hashes = self.offloaded_hashes(gpu_hashes)
        self.manager.touch(hashes)
        start = gpu_computed_blocks // self.factor
        return start, self.manager.lookup(hashes[start:])

    def load(self, gpu_hashes, start, hits, gpu_block_ids, gpu_computed_blocks=0):
        """update_state_after_alloc + start_load_kv + get_finished."""
        hashes = self.offloaded_hashes(gpu_hashes)[start:start + hits]
        src = self.manager.prepare_load(hashes)
        dst = gpu_spec(gpu_block_ids[gpu_computed_blocks:(start + hits) * self.factor])
        before = len(self.failed)
        self._run(src, dst)
        self.manager.complete_load(hashes)
        return len(self.failed) == before

    def store(self, gpu_hashes, start_block, gpu_block_ids):
        """build_connector_meta's stores, the next step's submission, then
        update_connector_output's complete_store."""
        hashes = self.offloaded_hashes(gpu_hashes)[start_block:]
        out = self.manager.prepare_store(hashes)
        if out is None:
            return None
        wanted = set(out.block_hashes_to_store)
        if not wanted:
            return 0
        ids = []
        for i, h in enumerate(hashes):
            if h in wanted:
                first = (start_block + i) * self.factor
                ids += gpu_block_ids[first:first + self.factor]
        before = len(self.failed)
        self._run(gpu_spec(ids), out.store_spec)
        self.manager.complete_store(list(wanted))
        assert len(self.failed) == before, "a failed store job stops vLLM"
        return len(wanted)

    def events(self):
        return list(self.manager.take_events())


def torch_kv_caches(plan_layers, num_blocks, block_size, kv_heads, head_dim, dtype, seed=0):
    """Per layer a (2, num_blocks, block_size, kv_heads, head_dim) tensor, as
    vLLM's FlashAttention backend allocates it."""
    import torch
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn((2, num_blocks, block_size, kv_heads, head_dim),
                              generator=g).to(dtype) for name in plan_layers}


def run_threads(n, fn):
    errors = []

    def body(i):
        try:
            fn(i)
        except BaseException as e:  # reported to the test
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def seed_env():
    return dict(os.environ, PYTHONHASHSEED="0")


def _fork_child(layout_json, options, key, conn_end):
    try:
        import kvtier
        from kvtier.integrations import vllm as backend
        cache = backend.shared_cache(kvtier.Layout.from_json(layout_json), options)
        conn_end.send((id(cache), os.getpid(), cache.load(key)))
    except BaseException as e:  # reported to the parent
        conn_end.send(("error", repr(e), None))


def load_in_forked_child(layout, options, key, timeout=120):
    """What a child forked as vLLM forks its workers gets from the backend's
    registry: (id of the cache shared_cache gave it, its pid, the block `key`
    loaded through it), or None when the child hung."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    proc = ctx.Process(target=_fork_child, args=(layout.to_json(), options, key, child_end))
    proc.start()
    got = parent_end.recv() if parent_end.poll(timeout) else None
    proc.join(10)
    if proc.is_alive():
        proc.kill()
        proc.join()
    return got
