"""SGLang host pools as kvtier block layouts (used by kvtier.integrations.sglang).

A host pool says where one page lives through ``get_page_buffer_meta(indices)``
(or, when heads are split for mixed TP sizes,
``get_split_heads_page_buffer_meta(indices, split)``): a list of pointers and
a list of sizes, some number of regions per page, of whatever sizes. One
region list of one page (or of one head split of it) is one kvtier block;
its layout has one state tensor per region, raw bytes ``U8 [T, bytes/T]``
(``[bytes]`` when a region does not divide by the page's tokens), under the
cache type ``sglang_<pool>_<host layout>_<dtype>`` so that the signature pins
the pool, its layout, its dtype and every region's size.

This module never imports torch or sglang: tensors are read through
``data_ptr()``, ``numel()`` and ``element_size()``, and index probes are made
with the torch SGLang already loaded (numpy otherwise).
"""

import ctypes
import re
import sys

import numpy as np

import kvtier

# Host layouts whose flat page (get_data_page / set_from_flat_data_page) is the
# page's regions in get_page_buffer_meta order (read in SGLang's MHA and MLA
# host pools): the copying and the zero-copy interfaces then store the same
# block. For any other layout (layer_first: K of every layer, then V, while
# get_page_buffer_meta goes layer by layer) the two differ, and the backend
# keeps one of them (extra config interface_v1) under its own signature.
FLAT_IS_REGION_ORDER = ("page_first", "page_first_direct", "page_head")


class Refused(kvtier.InvalidArgument):
    """A host pool the backend cannot store pages of (raised at registration)."""


def pool_key(name):
    """The string of a pool name (SGLang's PoolName is a str Enum)."""
    return str(getattr(name, "value", name))


def is_deepseek_v4(pool, name):
    names = [c.__name__.lower() for c in type(pool).__mro__]
    return pool_key(name).startswith("deepseek_v4") or any("deepseekv4" in n for n in names)


def index_count(indices):
    numel = getattr(indices, "numel", None)
    return int(numel()) if callable(numel) else len(indices)


def arange(n):
    """Indices 0..n-1 as the host pool expects them: a torch tensor when torch
    is loaded (it is in every SGLang process), else numpy."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.arange(n, dtype=torch.int64)
    return np.arange(n, dtype=np.int64)


def pointer_view(ptr, size):
    """A writable uint8 view of `size` bytes at address `ptr` (host pool memory)."""
    return np.frombuffer((ctypes.c_char * size).from_address(int(ptr)), dtype=np.uint8)


def byte_view(obj):
    """A writable uint8 numpy view of a CPU tensor or array (no copy)."""
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise kvtier.InvalidArgument("sglang: page buffer is not contiguous")
        return obj.reshape(-1).view(np.uint8)
    if hasattr(obj, "data_ptr"):  # a torch tensor
        if not obj.is_contiguous() or getattr(obj, "is_cuda", False):
            raise kvtier.InvalidArgument("sglang: page tensor must be contiguous host memory")
        return pointer_view(obj.data_ptr(), obj.numel() * obj.element_size())
    raise kvtier.InvalidArgument("sglang: expected a tensor or an array, got %s"
                                 % type(obj).__name__)


def _dtype_name(dtype):
    name = str(dtype)
    name = name[len("torch."):] if name.startswith("torch.") else name
    try:
        name = np.dtype(dtype).name
    except TypeError:
        pass
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "unknown"


class PoolPages:
    """One registered host pool: how its pages split into kvtier blocks.

    split > 1 (mixed TP sizes, page_head, SGLang's should_split_heads): a page
    is `split` blocks, one per head slice, each under its own shard."""

    def __init__(self, name, pool, split=1, flat=False):
        # SGLang's HostPoolGroup (hybrid models) has no get_page_buffer_meta of
        # its own: its anchor pool holds the KV pages.
        if not hasattr(pool, "get_page_buffer_meta") and hasattr(pool, "anchor_entry"):
            pool = pool.anchor_entry.host_pool
        self.name, self.pool, self.split = pool_key(name), pool, split
        self.what = "%s pool %s" % (self.name, type(pool).__name__)
        self.page_size = int(getattr(pool, "page_size", 1) or 1)
        self.host_layout = str(getattr(pool, "layout", "unknown"))
        if self.split > 1 and self.host_layout != "page_head":
            raise Refused("sglang: %s: splitting heads needs the page_head layout, not %s"
                          % (self.what, self.host_layout))
        try:
            sizes = [int(s) for s in self._meta(arange(self.page_size))[1]]
        except Exception as e:  # the pool's own refusal: say which pool
            raise Refused("sglang: %s (layout %s) gives no page regions for storage: %s: %s"
                          % (self.what, self.host_layout, type(e).__name__, e)) from None
        if not sizes or len(sizes) % self.split or any(s <= 0 for s in sizes):
            raise Refused("sglang: %s: page regions %s do not split into %d blocks"
                          % (self.what, sizes, self.split))
        self.region_sizes = sizes  # of one page, all splits
        self.per_block = len(sizes) // self.split
        self.page_bytes = sum(sizes)
        # flat: the copying interface's layout (one region, the flat page) for a
        # host layout whose flat page is not in region order.
        self.flat = flat
        block_sizes = [self.page_bytes] if flat else sizes[:self.per_block]
        if any(sizes[j * self.per_block:(j + 1) * self.per_block] != sizes[:self.per_block]
               for j in range(self.split)):
            raise Refused("sglang: %s: head splits of unequal sizes %s" % (self.what, sizes))
        self.layout = self._layout(block_sizes, _dtype_name(getattr(pool, "dtype", "unknown")))

    def _meta(self, indices):
        if self.split > 1:
            return self.pool.get_split_heads_page_buffer_meta(indices, self.split)
        return self.pool.get_page_buffer_meta(indices)

    def _layout(self, block_sizes, dtype):
        states = []
        for i, size in enumerate(block_sizes):
            shape = '["T", %d]' % (size // self.page_size) if size % self.page_size == 0 \
                else "[%d]" % size
            states.append('{"role": "region%d", "dtype": "U8", "shape": %s}' % (i, shape))
        cache_type = "sglang_%s_%s_%s%s" % (self.name, self.host_layout, dtype,
                                             "_flat" if self.flat else "")
        if len(cache_type) > 64:
            raise Refused("sglang: %s: cache type %r is longer than 64 bytes"
                          % (self.what, cache_type))
        return kvtier.Layout.from_json(
            '{"name": "sglang-%s", "block_tokens": %d, "layers": [{"cache_type": "%s", '
            '"states": [%s]}]}' % (self.name, self.page_size, cache_type, ",".join(states)))

    def flat_ok(self):
        """Whether a flat page splits into this layout's regions."""
        return self.split == 1 and (self.flat or self.host_layout in FLAT_IS_REGION_ORDER
                                    or len(self.region_sizes) == 1)

    def zero_copy_ok(self):
        return not self.flat

    def pages_of(self, n_keys, host_indices):
        """Per block (page-major, then head split), uint8 views of its regions in
        the host pool. Raises kvtier.InvalidArgument when the pool's answer is
        not this pool's page shape."""
        if index_count(host_indices) != n_keys * self.page_size:
            raise kvtier.InvalidArgument("sglang: %s: %d host indices for %d pages of %d tokens"
                                         % (self.what, index_count(host_indices), n_keys,
                                            self.page_size))
        if n_keys == 0:
            return []
        ptrs, sizes = self._meta(host_indices)
        sizes = [int(s) for s in sizes]
        if len(ptrs) != len(sizes) or sizes != self.region_sizes * n_keys:
            raise kvtier.InvalidArgument(
                "sglang: %s: the host pool gives %d regions of %s bytes for %d pages; "
                "registered pages have %s" % (self.what, len(ptrs), sorted(set(sizes)), n_keys,
                                              self.region_sizes))
        views = [pointer_view(p, s) for p, s in zip(ptrs, sizes)]
        return [views[b * self.per_block:(b + 1) * self.per_block]
                for b in range(n_keys * self.split)]

    def flat_regions(self, flat):
        """A flat page's bytes as this layout's regions (copying interface)."""
        if flat.nbytes != self.page_bytes:
            raise kvtier.InvalidArgument("sglang: %s: a flat page has %d bytes, want %d"
                                         % (self.what, flat.nbytes, self.page_bytes))
        if self.flat:
            return [flat]
        return np.split(flat, np.cumsum(self.region_sizes)[:-1])


class FlatPages(PoolPages):
    """The pages of a host pool SGLang never registers with the backend and
    hands it only as flat page tensors: the draft model's under speculative
    decoding, which SGLang's controller (upstream main, 2026-08-20) stores
    and loads through the copying batch_set / batch_get under keys
    "<page hash>.draft". One block per page, one region: the flat page."""

    def __init__(self, name, page_size, nbytes, dtype):
        self.name, self.pool, self.split = pool_key(name), None, 1
        self.what = "%s pages" % self.name
        self.page_size = int(page_size)
        self.host_layout = "flat"
        self.region_sizes, self.per_block, self.page_bytes = [int(nbytes)], 1, int(nbytes)
        self.flat = True
        self.layout = self._layout([self.page_bytes], _dtype_name(dtype))

    def pages_of(self, n_keys, host_indices):
        raise kvtier.InvalidArgument("sglang: %s: no host pool registered, flat pages only"
                                     % self.what)
