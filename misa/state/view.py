"""The running batch's view of the state: its writes, a read cache, the memory tier, pending commit buffers, RocksDB.

A batch writes into its write buffer (:class:`misa.state.write_buffer.WriteBuffer`, one dirty entry
per key); reads consult it first, then a read cache (:mod:`common.cache_contract`: the
Timestamp-Aware Cache or a baseline, when one is configured or prefetching is on). When the batch
ends, :meth:`StateView.freeze` drains its writes into the commit buffer of its
:class:`misa.state.version.BatchVersion` (the lifecycle is documented there), refreshes the read
cache with them and keeps the version: until RocksDB has the buffer (the version is applied), reads
consult it before RocksDB, so batch v+1 always sees version v and never waits for its commit. Below the read cache,
the memory tier (:mod:`misa.state.memory_tier`, when the operator names key spaces for it) answers the reads of the
spaces it holds whole, as of the last frozen version, without the commit buffers or RocksDB.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

from common.cache_contract import MISSING, CacheReader, CacheStats, ReadCache, stamps_at
from misa.state.commit_buffer import CommitBuffer
from misa.state.device_reads import device_bytes_read
from misa.state.memory_tier import MemoryTier
from misa.state.store import StateStore
from misa.state.version import BatchVersion
from misa.state.write_buffer import WriteBuffer


@dataclass(frozen=True)
class StateReads:
    """What a batch's state reads cost: their time, and the bytes the process read from a device meanwhile
    (None: not accounted on this system; reads of other threads in that time, such as compactions, count too)."""

    seconds: float = 0.0
    device_bytes: int | None = 0


class StateView:
    """Reads and writes of the running batch: its writes, a read cache, pending commit buffers, RocksDB.

    ``cache`` is the read cache used while prefetching is off (None: none); a prefetcher attached
    with :meth:`enable_prefetch` serves the reads through its own cache while prefetching is on. ``memory``: the
    memory tier below the cache (None: none).
    """

    def __init__(
        self,
        store: StateStore,
        cache: ReadCache | None = None,
        parallel_misses: bool = True,
        memory: MemoryTier | None = None,
    ):
        self.store = store
        self.writes = WriteBuffer()
        self.cache = cache
        self.memory = memory
        self.parallel_misses = parallel_misses  # misses read with shards in parallel on the store's pool
        self.prefetcher: CacheReader | None = None  # serves the reads while prefetching is on
        self._manager: CacheReader | None = None
        self._reads = StateReads()  # the reads (get_many) since the last take_reads
        self._open = BatchVersion()  # the batch's version, written into the write buffer
        self._frozen: list[BatchVersion] = []  # frozen versions whose buffers RocksDB may not have yet, oldest first
        self._lock = threading.Lock()

    def enable_prefetch(self, prefetcher: CacheReader, *, active: bool = True) -> None:
        """Serve reads through ``prefetcher`` (from now if ``active``, else from :meth:`set_prefetching`).

        Its cache is this view's read cache or one of its own (used only while prefetching is on); it
        fetches what it misses with :meth:`fetch_below`.
        """
        self._manager = prefetcher
        self.set_prefetching(active)

    def set_prefetching(self, on: bool) -> None:
        """Between batches: reads through the prefetcher and its cache, or not.

        Turned off, the prefetcher forgets its hints; a cache of the prefetcher's own (the TAC of
        ``spark.misa.cache.policy=auto``) is emptied, since the batches without it do not refresh it,
        and is cold when prefetching comes back. A configured tac, lru or clock cache serves both.
        """
        if self._manager is None or on == (self.prefetcher is not None):
            return
        if on:
            self.prefetcher = self._manager
            return
        self._manager.clear()
        self.prefetcher = None
        if self._manager.cache is not self.cache:
            self._manager.cache.clear()
            self._manager.cache.stats.take()  # its unread prefetches were counted with their batches

    @property
    def read_cache(self) -> ReadCache | None:
        """The read cache serving the batch: the prefetcher's while prefetching is on."""
        return self.prefetcher.cache if self.prefetcher is not None else self.cache

    def take_cache_stats(self) -> dict[str, int]:
        """The batch's cache counters (reads the write buffer answered count as hits) and, with a memory tier, the
        reads it answered and the keys it loaded; they restart."""
        written = self.writes.stats.take()
        memory = self.memory.take_stats() if self.memory is not None else {}
        cache = self.read_cache
        if cache is None:
            return {**CacheStats().as_dict(), **written, **memory}
        stats = cache.stats.take()
        stats["hits"] += written["hits"]
        return stats | memory

    # -- frozen versions' commit buffers, read below the read cache until RocksDB has them
    def _layers(self) -> list[CommitBuffer]:
        """Newest first; taken before RocksDB is read, so an apply in between changes nothing. Versions
        applied since the last read are dropped here."""
        with self._lock:
            self._frozen = [v for v in self._frozen if v.buffered]
            return [v.buffer for v in reversed(self._frozen)]

    def fetch_below(self, keys: Sequence[bytes], parallel: bool | None = None) -> list[bytes | None]:
        """Values of ``keys`` below the cache: the memory tier when it holds them all, else pending commit buffers,
        then RocksDB (with the shards in parallel when ``parallel``, by default ``parallel_misses``)."""
        if self.memory is not None:
            held = self.memory.get_many(keys, self._live_below)
            if held is not None:
                return held
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
        started, device_before = time.monotonic(), device_bytes_read()
        try:
            out = self.writes.get_many(keys)
            if out.count(MISSING) == len(keys):  # none written this batch (counted in C: no Python per key)
                return self._read(keys, ts)
            misses = [i for i, v in enumerate(out) if v is MISSING]
            if misses:
                for i, value in zip(misses, self._read([keys[i] for i in misses], stamps_at(ts, misses))):
                    out[i] = value
            return out
        finally:
            self._count_read(time.monotonic() - started, device_before)

    def _count_read(self, seconds: float, device_before: int | None) -> None:
        """Add a read of ``seconds`` to the batch's reads, with the device bytes read since ``device_before``."""
        device_after, device = device_bytes_read(), None
        so_far = self._reads.device_bytes
        if so_far is not None and device_before is not None and device_after is not None:
            device = so_far + device_after - device_before
        self._reads = StateReads(self._reads.seconds + seconds, device)

    def _read(self, keys: Sequence[bytes], ts: Sequence[int] | int) -> list[bytes | None]:
        """Values of keys the batch did not write: the prefetcher, or the read cache and below."""
        if self.prefetcher is not None:
            return self.prefetcher.read(keys, ts)
        if self.cache is None:
            return self.fetch_below(keys)
        out = self.cache.get_many(keys, ts)
        misses = [i for i, v in enumerate(out) if v is MISSING]
        if misses:
            wanted = [keys[i] for i in misses]
            fetched = self.fetch_below(wanted)
            for i, value in zip(misses, fetched):
                out[i] = value
            self.cache.fill(wanted, fetched, stamps_at(ts, misses))
        return out

    def take_reads(self) -> StateReads:
        """What the batch's state reads cost so far; resets it."""
        reads, self._reads = self._reads, StateReads()
        return reads

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Write this batch's new values (None deletes the key)."""
        self.writes.put_many(keys, values)
        if self.memory is not None:
            self.memory.put_many(keys, values)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete every key in [begin, end) as of this batch."""
        self.writes.delete_range(begin, end)
        if self.memory is not None:
            self.memory.delete_range(begin, end)

    def _live_below(self, begin: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The live entries of [begin, end) as the frozen versions left them, one at a time (so that the memory
        tier's load can stop at its budget): RocksDB's entries that no pending buffer decides, then the buffers' own."""
        layers = self._layers()  # before RocksDB: a commit landing in between then hides nothing
        if not layers:
            yield from self.store.items(begin, end)
            return
        net: dict[bytes, bytes | None] = {}  # what the pending buffers decide, oldest first
        for layer in reversed(layers):
            for b, e in layer.range_deletes:
                for key in [k for k in net if b <= k < e]:
                    del net[key]
            net.update((k, v) for k, v in layer.changes.items() if begin <= k < end)
        decided = set().union(*(layer.changes for layer in layers))
        ranges = [r for layer in layers for r in layer.range_deletes if r[0] < end and begin < r[1]]
        for key, value in self.store.items(begin, end):
            if key not in decided and not (ranges and any(b <= key < e for b, e in ranges)):
                yield key, value
        yield from ((k, v) for k, v in net.items() if v is not None)

    def scan(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        """Every live (key, value) in [begin, end), in key order, as this batch sees it."""
        merged: dict[bytes, bytes | None] = dict(self._live_below(begin, end))
        for b, e in self.writes.deleted_ranges:
            for key in [k for k in merged if b <= k < e]:
                merged[key] = None
        merged.update(self.writes.items(begin, end))
        return sorted((k, v) for k, v in merged.items() if v is not None)

    # -- batch boundaries
    def freeze(self, version: int) -> BatchVersion:
        """The batch's writes, drained into version ``version``'s commit buffer, which reads consult until
        the version is applied; the read cache is refreshed with them once no prefetch is in flight (none
        can then bring back an older value). The next batch writes into a new open version."""
        if self.prefetcher is not None:
            self.prefetcher.quiesce()
        changes, range_deletes = self.writes.drain()
        frozen, self._open = self._open, BatchVersion()
        frozen.freeze(CommitBuffer(version, changes, tuple(range_deletes)))
        with self._lock:
            self._frozen.append(frozen)
        if self.memory is not None:  # after the append: a load from now on reads the version, and applying it again
            self.memory.freeze(range_deletes)  # changes nothing
        cache = self.read_cache
        if cache is not None:
            cache.refresh(changes, range_deletes)
        return frozen

    def reset(self) -> None:
        """Forget the writes, the caches, any hints and frozen versions' buffers: the store was (re)loaded."""
        if self._manager is not None:
            self._manager.clear()
            self._manager.cache.clear()
        if self.cache is not None:
            self.cache.clear()
        self.writes.clear()
        with self._lock:
            self._frozen = []
        if self.memory is not None:  # and load it again now, in the background, before the next batch reads it
            self.memory.clear()
            self.memory.start_loading(self._live_below)

    def close(self) -> None:
        if self.memory is not None:
            self.memory.wait()
        if self._manager is not None:
            self._manager.close()
