"""Block-sized host buffers that come back for reuse, for the verified reads
the vLLM backend holds between a lookup and the load.

Why: a fresh buffer is a fresh mapping, and the kernel faults in and zeroes
each of its 4 KiB pages on the first write. Holding a 32k-token
qwen2.5-0.5b prefix (128 blocks of 3 MiB) in fresh `bytes` took about 1 s
on a 2-core guest, against about 40 ms for kvtier's load_many of the same
blocks into reused buffers (docs/vllm.md, "Host memory of a load").

A buffer goes back to the free list only when nothing references it any
more: what `take` hands out is a numpy array over the buffer, and a
finalizer on that array (which every view, slice, memoryview or torch
tensor made from it keeps alive) returns the buffer. So no reader ever sees
its bytes replaced. At most `keep_bytes` wait free: past that the buffers
freed longest ago go (unmapped when their last reference goes).

Thread-safe: one re-entrant lock over the free lists (a finalizer may run
on any thread, inside any call, the lock's holder's included)."""

import collections
import mmap
import threading
import weakref

PAGE = mmap.PAGESIZE


def _round_up(n, to):
    return -(-n // to) * to


def size_class(nbytes):
    """The mapping size a buffer of `nbytes` takes: whole pages, and above
    1 MiB the next eighth of a power of two (at most 1/8 more), so that
    buffers of sizes that vary a little (the rows of loads of different
    lengths) find each other's free buffers."""
    size = _round_up(max(int(nbytes), 1), PAGE)
    if size <= 1 << 20:
        return size
    step = 1 << (size.bit_length() - 4)  # an eighth of the power of two below
    return _round_up(size, step)


_HUGE = 2 << 20


def _map(size):
    """A new anonymous mapping of `size` bytes from a 2 MiB boundary (room
    for it mapped past the end), asking for transparent huge pages: one
    fault and one zeroing per 2 MiB instead of per 4 KiB where the kernel
    has them."""
    if size < _HUGE or not hasattr(mmap, "MADV_HUGEPAGE"):
        return mmap.mmap(-1, size)
    buf = mmap.mmap(-1, size + _HUGE)
    try:
        buf.madvise(mmap.MADV_HUGEPAGE)
    except OSError:
        pass  # advice only
    return buf


def _aligned_offset(np, buf):
    if len(buf) < _HUGE or not hasattr(mmap, "MADV_HUGEPAGE"):
        return 0
    return -np.frombuffer(buf, np.uint8, count=1).ctypes.data % _HUGE


class BlockBuffers:
    def __init__(self, keep_bytes=1 << 30):
        self.keep_bytes = keep_bytes
        self._lock = threading.RLock()
        self._free = {}  # mapping size -> deque of (when freed, mmap), oldest first
        self._free_bytes = 0
        self._freed = 0  # a clock of gives
        self.reused = 0  # takes served from the free list
        self.mapped = 0  # takes that mapped a new buffer

    def take(self, nbytes):
        """A writable uint8 array of `nbytes` (> 0) over a buffer of its own:
        of the free ones of its size class the one freed last (its lines
        may still be in the CPU's caches), else a new mapping."""
        size = size_class(nbytes)
        with self._lock:
            free = self._free.get(size)
            buf = free.pop()[1] if free else None
            if buf is not None:
                self._free_bytes -= size
                self.reused += 1
            else:
                self.mapped += 1
        if buf is None:
            buf = _map(size)
        import numpy as np  # (the module imports without numpy)
        array = np.frombuffer(buf, np.uint8, count=int(nbytes),
                              offset=_aligned_offset(np, buf))
        # Views of `array` (and views of those) keep it as their base: numpy
        # stops collapsing a view's base at the first array whose own base
        # is not an array (here the mapping).
        fin = weakref.finalize(array, self._give, buf, size)
        fin.atexit = False
        return array

    def _give(self, buf, size):
        # Runs while the dying array still holds its export of `buf`: a
        # buffer let go is unmapped when the last reference to it goes.
        if size > self.keep_bytes:
            return
        with self._lock:
            self._freed += 1
            self._free.setdefault(size, collections.deque()).append((self._freed, buf))
            self._free_bytes += size
            # Over the bound: the buffers freed longest ago go, whatever
            # their size (a size no load asks for any more does not stay).
            while self._free_bytes > self.keep_bytes:
                gone, queue = min(((sz, q) for sz, q in self._free.items() if q),
                                  key=lambda e: e[1][0][0])
                queue.popleft()
                self._free_bytes -= gone

    def free_bytes(self):
        with self._lock:
            return self._free_bytes

    def clear(self):
        """Lets go of every free buffer (unmapped as nothing else holds them)."""
        with self._lock:
            self._free, self._free_bytes = {}, 0


BUFFERS = BlockBuffers()
