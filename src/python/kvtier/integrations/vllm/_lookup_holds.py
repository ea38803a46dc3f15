"""The current route's lookups without block I/O on vLLM's scheduler thread
and without promising a block that cannot load.

vLLM's scheduler (offloading/scheduler.py at neuralmagic/vllm 017e9f44,
_maximal_prefix_lookup and _sliding_window_lookup) takes a RETRY as "not a
hit yet": it keeps scanning the request's keys (so every lookup can start its
work), then answers get_num_new_matched_tokens None and asks again on a later
step. So a lookup answers HIT only for a block whose verified bytes are held
here for that request; a block kvtier's index has starts one verified load on
kvtier's own threads and answers RETRY; the next lookup answers HIT once the
bytes are held, MISS when the load found the block missing or damaged.
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ._common import logger

HIT, MISS, RETRY = "hit", "miss", "retry"
_PENDING, _MISSING = "pending", "missing"


class _Entry:
    __slots__ = ("state", "nbytes", "blocks")

    def __init__(self, state, nbytes, blocks=None):
        self.state, self.nbytes, self.blocks = state, nbytes, blocks


def _answer(entry):
    return {_PENDING: RETRY, _MISSING: MISS}.get(entry.state, HIT)


class _Request:
    __slots__ = ("entries", "used")

    def __init__(self, now):
        self.entries, self.used = {}, now


class LookupHolds:
    """Per vLLM request, the blocks its lookups asked for: a verified load on
    kvtier's threads (pending), then the block files held (a HIT) or a miss.
    Bounded: at most `max_bytes` of blocks pending (counted at `reserve(key)`
    bytes) or held over all requests, a lookup beyond that answers MISS; a
    request dropped at on_new_request/on_request_finished, or after
    `max_idle` seconds without a call. Thread-safe: one lock over the
    requests, never held across kvtier (`read` runs on the pool's threads)."""

    def __init__(self, read, reserve, *, max_bytes=1 << 30, max_idle=300.0, threads=2,
                 clock=time.monotonic):
        self._read = read  # OffloadKey -> {kvtier key: bytes} of every shard, or None
        self._reserve = reserve  # OffloadKey -> the most bytes its blocks take
        self.max_bytes, self.max_idle, self._clock = max_bytes, max_idle, clock
        self._pool = ThreadPoolExecutor(max_workers=threads,
                                        thread_name_prefix="kvtier-vllm-lookup")
        self._lock = threading.Lock()
        self._requests = {}
        self._bytes = 0
        self._in_flight = 0
        self._swept = clock()
        self._refused = 0

    def lookup(self, req_id, key, present):
        """HIT, MISS or RETRY for `key` in request `req_id`; present(key) says
        whether kvtier's index holds it (no block read)."""
        with self._lock:
            request = self._request(req_id)
            entry = request.entries.get(key)
        if entry is not None:
            return _answer(entry)
        if not present(key):
            return MISS
        need = self._reserve(key)
        with self._lock:
            request = self._request(req_id)  # (dropped meanwhile: a new one)
            if key in request.entries:  # another thread started it meanwhile
                return _answer(request.entries[key])
            if self._bytes + need > self.max_bytes:
                self._refused += 1
                if self._refused == 1 or self._refused % 1000 == 0:
                    logger.warning("vllm: %d lookups answered a miss: blocks of live requests "
                                   "already hold %d bytes (bound %d)", self._refused,
                                   self._bytes, self.max_bytes)
                return MISS
            request.entries[key] = entry = _Entry(_PENDING, need)
            self._bytes += need
            self._in_flight += 1
        try:
            self._pool.submit(self._load, req_id, request, key, entry)
        except RuntimeError as e:  # the pool is shut down
            logger.warning("vllm: lookup could not start its load: %s", e)
            with self._lock:
                self._in_flight -= 1
                self._finish(request, key, entry, None)
            return MISS
        return RETRY

    def _load(self, req_id, request, key, entry):
        try:
            blocks = self._read(key)
        except Exception as e:
            logger.warning("vllm: the load a lookup started failed: %s", e)
            blocks = None
        with self._lock:
            self._in_flight -= 1
            if self._requests.get(req_id) is request and request.entries.get(key) is entry:
                self._finish(request, key, entry, blocks)

    def _finish(self, request, key, entry, blocks):
        self._bytes -= entry.nbytes
        if blocks is None:
            entry.state, entry.nbytes = _MISSING, 0
        else:
            entry.state, entry.blocks = "held", blocks
            entry.nbytes = sum(len(b) for b in blocks.values())
            self._bytes += entry.nbytes

    def take(self, req_id, key):
        """The held block files of `key` ({kvtier key: bytes}) for
        prepare_load, no longer held here; None when none are held."""
        with self._lock:
            request = self._requests.get(req_id)
            entry = request.entries.get(key) if request else None
            if entry is None or entry.blocks is None:
                return None
            del request.entries[key]
            self._bytes -= entry.nbytes
            return entry.blocks

    def drop(self, req_id):
        """Lets go of what request `req_id` holds (its loads in flight finish
        and are thrown away)."""
        with self._lock:
            self._drop(req_id)

    def _drop(self, req_id):
        request = self._requests.pop(req_id, None)
        if request is not None:
            self._bytes -= sum(e.nbytes for e in request.entries.values())

    def _request(self, req_id):
        now = self._clock()
        if now - self._swept >= 1.0:
            self._swept = now
            for old in [r for r, q in self._requests.items() if now - q.used > self.max_idle]:
                self._drop(old)
        request = self._requests.get(req_id)
        if request is None:
            request = self._requests[req_id] = _Request(now)
        request.used = now
        return request

    def clear(self):
        with self._lock:
            self._requests.clear()
            self._bytes = 0

    def busy(self):
        """Whether a load a lookup started is still running."""
        with self._lock:
            return self._in_flight > 0

    def held_bytes(self):
        with self._lock:
            return self._bytes

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._requests.clear()
            self._bytes = self._in_flight = 0  # cancelled loads never ran
