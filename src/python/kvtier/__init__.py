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
"""

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
