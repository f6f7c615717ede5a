"""The contract of the batch's caches: what the state view and the prefetch manager may rely on.

A batch's state goes through two layers above the pending commit buffers and RocksDB:

* the batch's writes: :class:`misa.state.write_buffer.WriteBuffer`, one dirty entry per key written
  this batch (the last put wins) and the ranges deleted this batch; the commit takes them all
  (``drain``) when the batch ends. Reads consult it first.
* an optional read cache, a :class:`ReadCache` (:class:`prefetch.cache.StateCache`: the TAC, LRU or
  Clock): clean copies of values below it, filled by reads and by prefetching, bounded in bytes,
  evicting by its policy.

What a read cache must do:

* **Reads** (:meth:`ReadCache.get_many`) answer per key a value (bytes), ``None`` (the key has no
  value) or :data:`MISSING` (the cache knows nothing: read it below).
* **Fills** (:meth:`ReadCache.fill`) add values read below; they never replace an entry the cache
  holds (it is as new or newer). A fill may race with the batch's writes: the view reads the write
  buffer first, so a stale clean copy is never served during the batch.
* **Refresh** (:meth:`ReadCache.refresh`) at the end of the batch, with no fill in flight (the view
  quiesces its prefetcher first): the batch's changes replace the held copies of those keys and
  the deleted ranges drop theirs, so every held entry is again the value below.

Threads: the batch's thread reads and refreshes; prefetch threads fill and renew at the same time,
so read caches are thread-safe.
"""

from __future__ import annotations

import enum
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, fields
from typing import Any, Final, Protocol, Sequence


class Marker(enum.Enum):
    """Answers of a read that are not a value."""

    MISSING = "missing"
    """The cache knows nothing about the key (a miss): read it below."""

    def __repr__(self) -> str:
        return self.name


MISSING: Final = Marker.MISSING
"""A read's answer for a key the cache knows nothing about. (A key with no value reads as ``None``.)"""


@dataclass
class CacheStats:
    """Counters of a cache's activity since the last :meth:`take`."""

    hits: int = 0  # reads answered by the cache (a negative entry or a deleted range too)
    misses: int = 0  # reads that returned MISSING
    evictions: int = 0
    prefetched_entries: int = 0  # entries filled by prefetching
    prefetched_entries_read: int = 0  # first reads of prefetched entries
    prefetched_entries_unread: int = 0  # prefetched entries evicted or dropped before any read
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Guards the counters; a cache shares its own lock, so a take sees whole operations."""

    def as_dict(self) -> dict[str, int]:
        """The counters by name."""
        with self.lock:
            return self._counters()

    def take(self) -> dict[str, int]:
        """The counters by name; they restart from zero."""
        with self.lock:
            out = self._counters()
            for name in out:
                setattr(self, name, 0)
        return out

    def _counters(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lock"}


class DeletedRanges:
    """Disjoint key ranges [begin, end) in key order: membership in O(log n)."""

    def __init__(self) -> None:
        self._begins: list[bytes] = []
        self._ends: list[bytes] = []

    def add(self, begin: bytes, end: bytes) -> None:
        """Add [begin, end), merged with the ranges it overlaps or touches."""
        first = bisect_left(self._ends, begin)  # the first range ending at or after begin
        last = bisect_right(self._begins, end)  # past the last range starting at or before end
        if first < last:
            begin, end = min(begin, self._begins[first]), max(end, self._ends[last - 1])
        self._begins[first:last] = [begin]
        self._ends[first:last] = [end]

    def __bool__(self) -> bool:
        return bool(self._begins)

    def __contains__(self, key: bytes) -> bool:
        i = bisect_right(self._begins, key) - 1
        return i >= 0 and key < self._ends[i]

    def items(self) -> list[tuple[bytes, bytes]]:
        """The ranges as (begin, end), in key order."""
        return list(zip(self._begins, self._ends))


def stamps_at(ts: Sequence[int] | int, positions: Sequence[int]) -> Sequence[int] | int:
    """The event times of the keys at ``positions`` (one time for all stays one time)."""
    return ts if isinstance(ts, int) else [ts[i] for i in positions]


class ReadCache(Protocol):
    """A cache of clean values below the batch's writes (module docstring)."""

    policy: str
    stats: CacheStats
    max_bytes: int

    @property
    def bytes_cached(self) -> int:
        """Bytes of the entries held (keys, values and their overhead)."""

    def get_many(self, keys: Sequence[bytes], ts: int | Sequence[int] = 0) -> list[Any]:
        """Per key: its value, None (no value) or :data:`MISSING`; ``ts``: each access's event time."""

    def contains_many(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key, whether a read of it would be answered here."""

    def fill(self, keys: Sequence[bytes], values: Sequence[bytes | None], ts: Any, *, prefetched: bool = False) -> int:
        """Clean entries read below the cache (``prefetched``: from hints); how many were inserted."""

    def renew(self, keys: Sequence[bytes], ts: Any) -> int:
        """New hints for held keys; how many were held."""

    def refresh(self, changes: dict[bytes, bytes | None], ranges: Sequence[tuple[bytes, bytes]]) -> None:
        """The batch's changes (None: deleted) and deleted ranges replace what the cache holds of them."""

    def clear(self) -> None:
        """Forget everything (the state was reloaded)."""

    def __len__(self) -> int: ...


class CacheReader(Protocol):
    """What the view needs from a prefetcher that serves the batch's reads through its cache."""

    cache: ReadCache

    def read(self, keys: Sequence[bytes], ts: Sequence[int] | int = 0) -> list[bytes | None]:
        """Values of ``keys`` as the batch sees them."""

    def quiesce(self) -> None:
        """Wait for the fetches in flight; drop the hints no fetch started."""

    def clear(self) -> None:
        """Forget every hint (the state was reloaded, or prefetching was turned off)."""

    def close(self) -> None: ...
