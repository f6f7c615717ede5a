"""The running batch's view of the state: the state cache, then pending commit buffers, then RocksDB.

A batch writes into the state cache (the Timestamp-Aware Cache or a baseline), which keeps one
dirty entry per key. When the batch ends, :meth:`StateView.freeze` drains them into the commit
buffer of its :class:`misa.state.version.BatchVersion` (the lifecycle is documented there) and
keeps the version: until RocksDB has the buffer (the version is applied), reads consult it before
RocksDB, so batch v+1 always sees version v and never waits for its commit.
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

from misa.config import MisaConfig
from misa.state.commit_buffer import CommitBuffer
from misa.state.store import StateStore, shard_of
from misa.state.version import BatchVersion
from misa.state.write_buffer import WriteBuffer
from prefetch.cache import MISSING, StateCache
from prefetch.manager import PrefetchManager


def new_cache(config: MisaConfig) -> StateCache | WriteBuffer:
    """The batch's cache as configured: a :class:`StateCache` with an eviction order, or only a write buffer."""
    policy = config.effective_cache_policy
    return WriteBuffer() if policy == "none" else StateCache(config.cache_max_bytes, policy)


class StateView:
    """Reads and writes of the running batch: the state cache, then pending commit buffers, then RocksDB.

    The cache (:class:`prefetch.cache.StateCache`, or by default only a :class:`WriteBuffer`) holds the
    batch's dirty entries, one per key; at the end of the batch :meth:`freeze` drains them into the
    version's commit buffer.
    """

    def __init__(self, store: StateStore, cache: StateCache | WriteBuffer | None = None, parallel_misses: bool = True):
        self.store = store
        self.cache = cache if cache is not None else WriteBuffer()
        self.parallel_misses = parallel_misses  # misses read with shards in parallel on the store's pool
        self.prefetcher: PrefetchManager | None = None  # serves the reads while prefetching is on
        self._manager: PrefetchManager | None = None
        self._plain = self.cache  # the cache while prefetching is off
        self.read_s = 0.0  # time spent in get_many since the last take_read_s
        self._open = BatchVersion()  # the batch's version, written into the cache
        self._frozen: list[BatchVersion] = []  # frozen versions whose buffers RocksDB may not have yet, oldest first
        self._lock = threading.Lock()

    def enable_prefetch(
        self, threads: int, chunk_keys: int, cache_bytes: int, *, active: bool = True
    ) -> PrefetchManager:
        """Serve reads through a prefetch manager that fills a state cache from hints (from now if
        ``active``, else from :meth:`set_prefetching`); without a state cache (only the write buffer),
        one of ``cache_bytes`` is made for prefetching (``spark.misa.cache.policy=auto``: a TAC).

        The pool's threads fetch one chunk (one shard) each; what a read must fetch itself (chunks
        no thread started yet, keys nobody hinted) it fetches with the shards in parallel.
        """
        own = not isinstance(self.cache, StateCache)  # only a write buffer: prefetching brings its own cache
        self._manager = PrefetchManager(
            StateCache(cache_bytes, "tac") if own else self.cache,
            lambda keys: self.fetch_below(keys, parallel=False),
            lambda key: shard_of(key, self.store.shards),
            threads,
            chunk_keys,
            read_fetch=lambda keys: self.fetch_below(keys, parallel=True),
        )
        self.set_prefetching(active)
        return self._manager

    def set_prefetching(self, on: bool) -> None:
        """Between batches (nothing dirty): reads through the prefetch manager and its cache, or not.

        Turned off, the manager forgets its hints; a cache of prefetching's own (the TAC of
        ``spark.misa.cache.policy=auto``) is emptied, since the batches without it write around it, and
        is cold when prefetching comes back. A configured tac, lru or clock cache serves both.
        """
        if self._manager is None or on == (self.prefetcher is not None):
            return
        if on:
            self.prefetcher, self.cache = self._manager, self._manager.cache
            return
        self._manager.clear()
        self.prefetcher, self.cache = None, self._plain
        if self._manager.cache is not self._plain:
            self._manager.cache.clear()
            self._manager.cache.stats.take()  # its unread prefetches were counted with their batches

    # -- frozen versions' commit buffers, read below the cache until RocksDB has them
    def _layers(self) -> list[CommitBuffer]:
        """Newest first; taken before RocksDB is read, so an apply in between changes nothing. Versions
        applied since the last read are dropped here."""
        with self._lock:
            self._frozen = [v for v in self._frozen if v.buffered]
            return [v.buffer for v in reversed(self._frozen)]

    def fetch_below(self, keys: Sequence[bytes], parallel: bool | None = None) -> list[bytes | None]:
        """Values of ``keys`` below the cache: pending commit buffers, then RocksDB (with the shards
        in parallel when ``parallel``, by default ``parallel_misses``)."""
        out: list[object] = [MISSING] * len(keys)
        missing = list(range(len(keys)))
        for layer in self._layers():  # newest first: the first buffer that decides a key wins
            missing = layer.resolve(keys, missing, out)
        if missing:
            parallel = self.parallel_misses if parallel is None else parallel
            for i, value in zip(missing, self.store.get_many([keys[i] for i in missing], parallel)):
                out[i] = value
        return out  # type: ignore[return-value]

    # -- the batch's reads and writes
    def get_many(self, keys: Sequence[bytes], ts: Sequence[int] | int = 0) -> list[bytes | None]:
        """Values of ``keys`` as this batch sees them; ``ts`` is each access's event time (for the TAC)."""
        started = time.monotonic()
        try:
            if self.prefetcher is not None:
                return self.prefetcher.read(keys, ts)
            out = self.cache.get_many(keys, ts)
            misses = [i for i, v in enumerate(out) if v is MISSING]
            if misses:
                fetched = self.fetch_below([keys[i] for i in misses])
                for i, value in zip(misses, fetched):
                    out[i] = value
                miss_ts = [ts] * len(misses) if isinstance(ts, int) else [ts[i] for i in misses]
                self.cache.fill([keys[i] for i in misses], fetched, miss_ts)
            return out  # type: ignore[return-value]
        finally:
            self.read_s += time.monotonic() - started

    def take_read_s(self) -> float:
        """Time the batch spent reading state; resets it."""
        read_s, self.read_s = self.read_s, 0.0
        return read_s

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None], ts: Sequence[int] | int = 0) -> None:
        """Write this batch's new values (None deletes the key)."""
        self.cache.put_many(keys, values, ts)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete every key in [begin, end) as of this batch."""
        self._quiesce()
        self.cache.delete_range(begin, end)

    def scan(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        """Every live (key, value) in [begin, end), in key order, as this batch sees it."""
        self._quiesce()
        layers = self._layers()  # before RocksDB: a commit landing in between then hides nothing
        merged: dict[bytes, bytes | None] = dict(self.store.scan(begin, end))
        for layer in reversed(layers):  # oldest first
            for b, e in layer.range_deletes:
                for key in [k for k in merged if b <= k < e]:
                    merged[key] = None
            merged.update((k, v) for k, v in layer.changes.items() if begin <= k < end)
        for b, e in self.cache.deleted_ranges:
            for key in [k for k in merged if b <= k < e]:
                merged[key] = None
        merged.update(self.cache.items(begin, end))
        return sorted((k, v) for k, v in merged.items() if v is not None)

    # -- batch boundaries
    def freeze(self, version: int) -> BatchVersion:
        """The batch's changes, drained from the cache into version ``version``'s commit buffer, which reads
        consult until the version is applied; the next batch writes into a new open version."""
        self._quiesce()
        changes, range_deletes = self.cache.drain()
        frozen, self._open = self._open, BatchVersion()
        frozen.freeze(CommitBuffer(version, changes, tuple(range_deletes)))
        with self._lock:
            self._frozen.append(frozen)
        return frozen

    def reset(self) -> None:
        """Forget the caches, any hints and frozen versions' buffers: the store was (re)loaded."""
        if self._manager is not None:
            self._manager.clear()
            self._manager.cache.clear()
        self._plain.clear()
        with self._lock:
            self._frozen = []

    def _quiesce(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.quiesce()

    def close(self) -> None:
        if self._manager is not None:
            self._manager.close()
