"""The batch's write buffer without a read cache: the state cache's job when nothing is prefetched.

With prefetching off, a read cache in Python costs more per key (an eviction order to keep, a
lock, byte accounting) than RocksDB's own multi-get from its memtables and block cache saves, so
by default (``spark.misa.cache.policy=auto``) the batch's view holds only what it must: one dirty
entry per key written this batch (the last put wins) and the ranges deleted this batch, with the
semantics of :class:`~misa.state.cache_contract.BatchCache` (a put after a range delete survives it; a read of
a key in a deleted range is None). Every other read goes below, to the pending commit buffers and
RocksDB. Bulk operations are dict operations, without a per-key Python loop where one can be
avoided.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from misa.state.cache_contract import MISSING, CacheStats, DeletedRanges


class WriteBuffer:
    """The batch's dirty entries and deleted ranges, with the read side of the state cache's interface."""

    policy = "none"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stats = CacheStats(lock=self._lock)
        self._dirty: dict[bytes, bytes | None] = {}
        self._deleted = DeletedRanges()

    def get_many(self, keys: Sequence[bytes], ts: int | Sequence[int] = 0) -> list[Any]:
        """Per key: the value this batch wrote (None: deleted), None in a range deleted this batch, else MISSING."""
        dirty = self._dirty
        if self._deleted:
            deleted = self._deleted
            out = [dirty[k] if k in dirty else (None if k in deleted else MISSING) for k in keys]
        else:
            out = [dirty.get(k, MISSING) for k in keys]
        misses = out.count(MISSING)
        with self._lock:
            self.stats.hits += len(out) - misses
            self.stats.misses += misses
        return out

    def contains_many(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key, whether a read would be answered here."""
        deleted = self._deleted or ()
        return [k in self._dirty or k in deleted for k in keys]

    def fill(self, keys: Sequence[bytes], values: Sequence[bytes | None], ts: Any, *, prefetched: bool = False) -> int:
        """Nothing is cached: values read below stay below."""
        return 0

    def renew(self, keys: Sequence[bytes], ts: Any) -> int:
        return 0

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None], ts: int | Sequence[int] = 0) -> None:
        """The batch's new values (None deletes the key): one entry per key, the last put wins."""
        if len(values) != len(keys):
            raise ValueError(f"values has {len(values)} values for {len(keys)} keys")
        self._dirty.update(zip(keys, values))

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete the keys in [begin, end) as of this batch: written ones are dropped, the range is recorded."""
        if begin >= end:
            return
        for key in [k for k in self._dirty if begin <= k < end]:
            del self._dirty[key]
        self._deleted.add(begin, end)

    def drain(self) -> tuple[dict[bytes, bytes | None], list[tuple[bytes, bytes]]]:
        """The batch's changes for the commit (ranges first, then the entries); the buffer starts empty."""
        changes, ranges = self._dirty, self._deleted.items()
        self._dirty, self._deleted = {}, DeletedRanges()
        return changes, ranges

    def clear(self) -> None:
        """Forget the batch's writes (the state was reloaded)."""
        self._dirty, self._deleted = {}, DeletedRanges()

    def items(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes | None]]:
        """The entries written this batch in [begin, end), in no order."""
        return [(k, v) for k, v in self._dirty.items() if begin <= k < end]

    @property
    def deleted_ranges(self) -> list[tuple[bytes, bytes]]:
        return self._deleted.items()

    @property
    def dirty_count(self) -> int:
        return len(self._dirty)

    def __len__(self) -> int:
        return len(self._dirty)
