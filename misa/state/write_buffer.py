"""The batch's writes: one dirty entry per key written this batch and the ranges deleted this batch.

Reads consult it before any read cache (:mod:`common.cache_contract`): a key written this batch
reads as its last put (None: deleted), a key in a range deleted this batch as None. A put after a
range delete survives it; one before it is dropped by it. :meth:`WriteBuffer.drain` hands both to
the commit, which applies the ranges first, then the entries (as
:class:`misa.state.commit_buffer.CommitBuffer` and ``StateStore.apply`` do). Bulk operations are dict
operations, without a per-key Python loop where one can be avoided (the write-dedup buffer of
Kafka's KIP-63).
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from common.cache_contract import MISSING, CacheStats, DeletedRanges


class WriteBuffer:
    """The batch's dirty entries and deleted ranges; counts the reads it answers as hits."""

    def __init__(self) -> None:
        self.stats = CacheStats(lock=threading.Lock())
        self._dirty: dict[bytes, bytes | None] = {}
        self._deleted = DeletedRanges()

    def get_many(self, keys: Sequence[bytes]) -> list[Any]:
        """Per key: the value this batch wrote (None: deleted), None in a range deleted this batch, else MISSING."""
        dirty = self._dirty
        if self._deleted:
            deleted = self._deleted
            out = [dirty[k] if k in dirty else (None if k in deleted else MISSING) for k in keys]
        elif dirty:
            out = [dirty.get(k, MISSING) for k in keys]
        else:
            out = [MISSING] * len(keys)
        misses = out.count(MISSING)
        with self.stats.lock:
            self.stats.hits += len(out) - misses
            self.stats.misses += misses
        return out

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
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
        """The ranges deleted this batch, merged, in key order."""
        return self._deleted.items()

    def __len__(self) -> int:
        """Keys written this batch."""
        return len(self._dirty)
