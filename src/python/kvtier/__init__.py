"""kvtier: KV-cache tiers (RAM, disk) for LLM inference engines.

Blocks of KV state are named by chained SHA-256 keys of their tokens
(``block_keys``, ``KeyChain``), travel as verified safetensors block files
(``encode_block``, ``decode_block``) and are kept by a ``Cache`` in RAM over an
optional disk folder, across requests, processes and restarts::

    import kvtier, numpy as np
    keys = kvtier.block_keys("my-model", kvtier.layout_signature("tiny"), 16, range(64))
    with kvtier.Cache("tiny", host_bytes=1 << 30, disk_dir="/tmp/kv") as cache:
        hit = cache.match(keys)                 # leading blocks available
        buf = np.empty(1 << 16, np.uint8)
        n = cache.load_into(keys[0], buf) if hit else 0   # bytes written, 0 on a miss

Errors raise ``kvtier.Error`` subclasses named after status codes
(``kvtier.InvalidArgument``, ``kvtier.Corruption``, ...); a miss is not an
error. Long calls release the GIL. See docs/python.md.

numpy is optional: ``import kvtier`` and every call that takes buffers (bytes,
bytearray, memoryview, numpy or torch arrays) work without it. Two need it, as
they make numpy arrays: ``decode_block`` and ``TensorInfo.numpy_dtype``;
without numpy they raise ImportError naming numpy. torch is needed only by the
engine backends, ``kvtier.integrations.vllm`` and ``kvtier.integrations.sglang``.
"""

import importlib.util as _importlib_util

from ._kvtier import (  # noqa: F401
    Cache,
    Corruption,
    Error,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    IOError,
    KeyChain,
    KeySequence,
    Layout,
    NotFound,
    ResourceExhausted,
    TensorInfo,
    Unavailable,
    __version__,
    block_keys,
    decode_block,
    encode_block,
    layout_signature,
    options,
)

__all__ = [
    "Cache",
    "Corruption",
    "Error",
    "FailedPrecondition",
    "IOError",
    "Internal",
    "InvalidArgument",
    "KeyChain",
    "KeySequence",
    "Layout",
    "NotFound",
    "ResourceExhausted",
    "TensorInfo",
    "Unavailable",
    "__version__",
    "block_keys",
    "decode_block",
    "encode_block",
    "layout_signature",
    "options",
]


# The calls that make numpy arrays (see the docstring above).
_NUMPY_CALLS = ("decode_block", "TensorInfo.numpy_dtype")


def _numpy_missing():
    try:
        return _importlib_util.find_spec("numpy") is None
    except (ImportError, ValueError):  # sys.modules["numpy"] is None or has no spec
        return True


def _without_numpy(call, error):
    raise ImportError("kvtier.%s makes numpy arrays and needs numpy, which this Python does not "
                      "have (pip install numpy); the calls that take buffers (bytes, bytearray, "
                      "memoryview, torch tensors) work without it" % call,
                      name="numpy") from error


if _numpy_missing():
    # Same calls, with pybind11's bare "No module named 'numpy'" replaced by
    # one that names the call; nothing changes where numpy is installed.
    def _numpy_call(call, function):
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except ModuleNotFoundError as error:
                if (error.name or "").split(".")[0] != "numpy":
                    raise
                _without_numpy(call, error)
        wrapper.__name__ = function.__name__
        wrapper.__qualname__ = function.__qualname__
        wrapper.__doc__ = function.__doc__
        return wrapper

    decode_block = _numpy_call("decode_block", decode_block)
    TensorInfo.numpy_dtype = property(
        _numpy_call("TensorInfo.numpy_dtype", TensorInfo.numpy_dtype.fget),
        doc=TensorInfo.numpy_dtype.__doc__)
