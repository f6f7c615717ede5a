"""The state cache: the Timestamp-Aware Cache or an LRU / Clock baseline, a :mod:`misa.state.cache_contract` cache.

Entries are a value (bytes, or None: "the key has no value", a negative entry), a dirty flag and a
place in an eviction order (:mod:`prefetch.policies`). Capacity is in bytes: key, value and
:data:`ENTRY_OVERHEAD` per entry. Whenever an operation leaves the cache over capacity, the
order's victims are evicted until it fits again; a dirty victim moves to the *eviction buffer*
(not counted against the capacity) where reads still find it, until the commit drains it. A read
or hint of a key in the eviction buffer moves it back into the cache, as in the TAC paper.

The batch's writes are one dirty entry per key (the write-dedup buffer of Kafka's KIP-63), handed
to the commit by :meth:`StateCache.drain`.

Range deletes: :meth:`StateCache.delete_range` drops every entry in the range (clean, dirty or in
the eviction buffer) and records the range; until the next drain, a read of a key in a recorded
range is None and a fill of such a key is ignored (its fetched value is older than the delete).
A put after the range delete survives it: :meth:`StateCache.drain` returns the batch's ranges and
its dirty entries, and the commit applies the ranges first, then the entries (as
``misa.state.commit_buffer.CommitBuffer`` and ``StateStore.apply`` do). A put *before* the range delete
is dropped by it.
"""

from __future__ import annotations

import itertools
import threading
from numbers import Integral
from typing import Any, Final, Iterable, Sequence

from misa.state.cache_contract import MISSING, CacheStats, DeletedRanges

from .policies import ORDERS, eviction_order

POLICIES: Final = tuple(ORDERS)
ENTRY_OVERHEAD: Final = 64  # bytes counted per entry besides its key and value


def _size(key: bytes, value: bytes | None) -> int:
    return len(key) + len(value or b"") + ENTRY_OVERHEAD


def _stamps(ts: int | Sequence[int], n: int) -> Iterable[int]:
    """One event time per key: ``ts`` itself, or ``ts[i]`` for key ``i``."""
    if isinstance(ts, (int, Integral)):  # numpy integers too
        return itertools.repeat(int(ts), n)
    if len(ts) != n:
        raise ValueError(f"ts has {len(ts)} timestamps for {n} keys")
    return map(int, ts)


def _check_values(values: Sequence[bytes | None], n: int) -> None:
    if len(values) != n:
        raise ValueError(f"values has {len(values)} values for {n} keys")


class StateCache:
    """A byte-bounded state cache with dirty tracking, an eviction buffer and statistics.

    Thread-safe: prefetch threads fill and renew while the batch thread reads and writes. Reads,
    fills, renewals and writes cost O(log n) per key (TAC) or O(1) (LRU, Clock), amortized;
    :meth:`delete_range` and :meth:`items` take one pass over the cache (a batch calls them once
    or twice, and a sorted index would tax every insert); :meth:`drain` is O(dirty entries).
    """

    def __init__(self, max_bytes: int, policy: str = "tac") -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, Integral) or max_bytes <= 0:
            raise ValueError(f"max_bytes must be a positive number of bytes, not {max_bytes!r}")
        self._order = eviction_order(policy)  # raises for an unknown policy
        self.max_bytes = int(max_bytes)
        self.policy = policy
        self._lock = threading.Lock()
        self.stats = CacheStats(lock=self._lock)
        self._values: dict[bytes, bytes | None] = {}
        self._dirty: set[bytes] = set()
        self._prefetched: set[bytes] = set()  # filled by prefetching, not read yet
        self._evicted: dict[bytes, bytes | None] = {}  # the eviction buffer: dirty victims
        self._deleted = DeletedRanges()  # ranges deleted since the last drain
        self._bytes = 0
        self._evicted_bytes = 0

    # ------------------------------------------------------------------ reads
    def get_many(self, keys: Sequence[bytes], ts: int | Sequence[int] = 0) -> list[Any]:
        """Per key: its value (bytes or None) or ``MISSING``; ``ts`` is each access's event time.

        A hit records the access: TAC sets the entry's timestamp to ``ts``, LRU makes it the most
        recent, Clock sets its reference bit; a hit in the eviction buffer moves the entry back.
        """
        out: list[Any] = []
        with self._lock:
            for key, t in zip(keys, _stamps(ts, len(keys))):
                if key in self._values:
                    value = self._values[key]
                    self._order.touch(key, t)
                    if key in self._prefetched:
                        self._prefetched.discard(key)
                        self.stats.prefetched_entries_read += 1
                elif key in self._evicted:
                    value = self._revive(key, t)
                elif key in self._deleted:
                    value = None
                else:
                    out.append(MISSING)
                    self.stats.misses += 1
                    continue
                out.append(value)
                self.stats.hits += 1
            self._evict()
        return out

    def contains(self, key: bytes) -> bool:
        """Whether a read of ``key`` would hit: cached, in the eviction buffer or deleted this batch."""
        return self.contains_many([key])[0]

    def contains_many(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key, whether a read of it would hit (see :meth:`contains`); one lock for all."""
        with self._lock:
            values, evicted = self._values, self._evicted
            deleted = self._deleted or ()  # most batches delete no range
            return [key in values or key in evicted or key in deleted for key in keys]

    # ------------------------------------------------------------------ clean entries, hints
    def fill(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        ts: int | Sequence[int],
        *,
        prefetched: bool = False,
    ) -> int:
        """Add clean entries fetched below the cache; returns how many were inserted.

        A key the cache already holds (clean, dirty or in the eviction buffer) keeps its entry,
        which is newer or as new, and a key in a range deleted this batch stays deleted.
        ``prefetched`` marks entries filled from hints (``ts``: the hints' future event times);
        for one the cache already holds, the hint renews it (:meth:`renew`).
        """
        _check_values(values, len(keys))
        inserted = 0
        with self._lock:
            deleted = self._deleted or ()  # most batches delete no range
            for key, value, t in zip(keys, values, _stamps(ts, len(keys))):
                if key in self._values or key in self._evicted:
                    if prefetched:
                        self._renew(key, t)
                elif key not in deleted:
                    self._insert(key, value, t, dirty=False)
                    inserted += 1
                    if prefetched:
                        self._prefetched.add(key)
            if prefetched:
                self.stats.prefetched_entries += inserted
            self._evict()
        return inserted

    def renew(self, keys: Sequence[bytes], ts: int | Sequence[int]) -> int:
        """New hints for held keys; returns how many were held (cached or in the eviction buffer).

        TAC raises an entry's timestamp to ``ts`` (never lowers it), LRU and Clock count a use; an
        entry in the eviction buffer moves back into the cache.
        """
        with self._lock:
            renewed = sum(self._renew(key, t) for key, t in zip(keys, _stamps(ts, len(keys))))
            self._evict()
        return renewed

    # ------------------------------------------------------------------ the batch's writes
    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None], ts: int | Sequence[int] = 0) -> None:
        """The batch's new values (None deletes the key): one dirty entry per key, the last put wins."""
        _check_values(values, len(keys))
        with self._lock:
            for key, value, t in zip(keys, values, _stamps(ts, len(keys))):
                if key in self._values:
                    self._bytes += len(value or b"") - len(self._values[key] or b"")  # the key's size is unchanged
                    self._values[key] = value
                    self._dirty.add(key)
                    self._prefetched.discard(key)
                    self._order.touch(key, t)
                else:
                    if key in self._evicted:
                        self._unbuffer(key)  # superseded by this write
                    self._insert(key, value, t, dirty=True)
            self._evict()

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete the keys in [begin, end) as of this batch (see the module docstring); one pass."""
        if begin >= end:
            return
        with self._lock:
            for key in [k for k in self._values if begin <= k < end]:
                self._drop(key)
                self._order.remove(key)
            for key in [k for k in self._evicted if begin <= k < end]:
                self._unbuffer(key)
            self._deleted.add(begin, end)

    def drain(self) -> tuple[dict[bytes, bytes | None], list[tuple[bytes, bytes]]]:
        """The batch's changes for the commit: ``(changes, range_deletes)``.

        ``changes`` holds every dirty entry, cached or in the eviction buffer (None: delete the key);
        ``range_deletes`` are the ranges deleted this batch, merged, in key order. The commit applies
        the ranges first, then the changes. Cached entries stay, now clean; the eviction buffer and
        the ranges are emptied.
        """
        with self._lock:
            changes = self._evicted
            changes.update((key, self._values[key]) for key in self._dirty)
            ranges = self._deleted.items()
            self._dirty, self._evicted, self._deleted = set(), {}, DeletedRanges()
            self._evicted_bytes = 0
            self._order.tidy()
        return changes, ranges

    def clear(self) -> None:
        """Forget everything, dirty entries too (the state was reloaded)."""
        with self._lock:
            self.stats.prefetched_entries_unread += len(self._prefetched)
            self._order = eviction_order(self.policy)
            self._values, self._dirty, self._prefetched, self._evicted = {}, set(), set(), {}
            self._deleted = DeletedRanges()
            self._bytes = self._evicted_bytes = 0

    # ------------------------------------------------------------------ inspection
    @property
    def bytes_cached(self) -> int:
        """Bytes of the cached entries (the eviction buffer not included); at most ``max_bytes``."""
        return self._bytes

    @property
    def dirty_count(self) -> int:
        """Entries the next drain returns (cached dirty ones and the eviction buffer)."""
        with self._lock:
            return len(self._dirty) + len(self._evicted)

    @property
    def eviction_buffer_bytes(self) -> int:
        """Bytes of the entries in the eviction buffer."""
        return self._evicted_bytes

    def __len__(self) -> int:
        """Cached entries (the eviction buffer not included)."""
        return len(self._values)

    def items(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes | None]]:
        """Every entry held in [begin, end), cached or in the eviction buffer, in no order; one pass."""
        with self._lock:
            found = [(k, v) for k, v in self._values.items() if begin <= k < end]
            found += [(k, v) for k, v in self._evicted.items() if begin <= k < end]
        return found

    @property
    def deleted_ranges(self) -> list[tuple[bytes, bytes]]:
        """The ranges deleted since the last drain, merged, in key order."""
        with self._lock:
            return self._deleted.items()

    # ------------------------------------------------------------------ internals (lock held)
    def _insert(self, key: bytes, value: bytes | None, ts: int, dirty: bool) -> None:
        self._values[key] = value
        self._bytes += _size(key, value)
        self._order.insert(key, ts)
        if dirty:
            self._dirty.add(key)

    def _drop(self, key: bytes) -> bytes | None:
        """Remove a cached entry (the order is the caller's business); a prefetched one never read was wasted."""
        value = self._values.pop(key)
        self._bytes -= _size(key, value)
        self._dirty.discard(key)
        if key in self._prefetched:
            self._prefetched.discard(key)
            self.stats.prefetched_entries_unread += 1
        return value

    def _unbuffer(self, key: bytes) -> bytes | None:
        """Take an entry out of the eviction buffer."""
        value = self._evicted.pop(key)
        self._evicted_bytes -= _size(key, value)
        return value

    def _revive(self, key: bytes, ts: int) -> bytes | None:
        """Move an entry from the eviction buffer back into the cache, still dirty."""
        value = self._unbuffer(key)
        self._insert(key, value, ts, dirty=True)
        return value

    def _renew(self, key: bytes, ts: int) -> bool:
        if key in self._values:
            self._order.renew(key, ts)
        elif key in self._evicted:
            self._revive(key, ts)
        else:
            return False
        return True

    def _evict(self) -> None:
        """Evict the order's victims until the cached bytes fit; dirty ones go to the eviction buffer."""
        while self._bytes > self.max_bytes:
            key = self._order.victim()
            dirty = key in self._dirty
            value = self._drop(key)
            self.stats.evictions += 1
            if dirty:
                self._evicted[key] = value
                self._evicted_bytes += _size(key, value)
                self.stats.dirty_evictions += 1
