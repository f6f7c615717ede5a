"""The running batch's view of the state: the batch's cache, then pending commit buffers, then RocksDB.

A batch writes into its cache (:mod:`misa.state.cache_contract`: a write buffer, or the
Timestamp-Aware Cache or a baseline), which keeps one dirty entry per key. When the batch ends they are drained into a
:class:`misa.state.commit_buffer.CommitBuffer` owned by the commit of that version; until the
commit has applied it to RocksDB, reads consult it before RocksDB, so batch v+1 always sees
version v and never waits for its commit.
"""

from __future__ import annotations

import threading
import time
from typing import Sequence

from misa.state.cache_contract import MISSING, BatchCache, CacheReader
from misa.state.commit_buffer import CommitBuffer
from misa.state.store import StateStore
from misa.state.write_buffer import WriteBuffer


class StateView:
    """Reads and writes of the running batch: the batch's cache, then pending commit buffers, then RocksDB.

    The cache (a :class:`~misa.state.cache_contract.BatchCache`: by default only a write buffer)
    holds the batch's dirty entries, one per key; at the end of the batch :meth:`freeze` drains them
    into the version's commit buffer. A prefetcher attached with :meth:`enable_prefetch` serves the
    reads through its own cache while prefetching is on.
    """

    def __init__(self, store: StateStore, cache: BatchCache | None = None, parallel_misses: bool = True):
        self.store = store
        self.cache: BatchCache = cache if cache is not None else WriteBuffer()
        self.parallel_misses = parallel_misses  # misses read with shards in parallel on the store's pool
        self.prefetcher: CacheReader | None = None  # serves the reads while prefetching is on
        self._manager: CacheReader | None = None
        self._plain = self.cache  # the cache while prefetching is off
        self.read_s = 0.0  # time spent in get_many since the last take_read_s
        self._pending: list[CommitBuffer] = []
        self._lock = threading.Lock()

    def enable_prefetch(self, prefetcher: CacheReader, *, active: bool = True) -> None:
        """Serve reads through ``prefetcher`` (from now if ``active``, else from :meth:`set_prefetching`).

        Its cache is this view's cache or one of its own (used only while prefetching is on); it
        fetches what it misses with :meth:`fetch_below`.
        """
        self._manager = prefetcher
        self.set_prefetching(active)

    def set_prefetching(self, on: bool) -> None:
        """Between batches (nothing dirty): reads through the prefetcher and its cache, or not.

        Turned off, the prefetcher forgets its hints; a cache of the prefetcher's own (the TAC of
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

    def add_pending(self, buffer: CommitBuffer) -> None:
        with self._lock:
            self._pending.append(buffer)

    def drop_pending(self, version: int) -> None:
        with self._lock:
            self._pending = [b for b in self._pending if b.version != version]

    def _layers(self) -> list[CommitBuffer]:
        """Newest first; taken before RocksDB is read, so an apply in between changes nothing."""
        with self._lock:
            return list(reversed(self._pending))

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
    def freeze(self, version: int) -> CommitBuffer:
        """The batch's changes, drained from the cache into version ``version``'s commit buffer."""
        self._quiesce()
        changes, range_deletes = self.cache.drain()
        return CommitBuffer(version, changes, tuple(range_deletes))

    def reset(self) -> None:
        """Forget the caches, any hints and pending commit buffers: the store was (re)loaded."""
        if self._manager is not None:
            self._manager.clear()
            self._manager.cache.clear()
        self._plain.clear()
        with self._lock:
            self._pending = []

    def _quiesce(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.quiesce()

    def close(self) -> None:
        if self._manager is not None:
            self._manager.close()
