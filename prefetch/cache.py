"""The state cache: the Timestamp-Aware Cache or an LRU / Clock baseline, a :mod:`common.cache_contract` read cache.

Entries are clean copies of values below the batch's writes (bytes, or None: "the key has no value",
a negative entry), each with a place in an eviction order (:mod:`prefetch.policies`). Capacity is in
bytes: key, value and :data:`ENTRY_OVERHEAD` per entry. Whenever an operation leaves the cache over
capacity, the order's victims are evicted until it fits again. The batch's writes do not go through
the cache: the view keeps them in its write buffer, read first, and :meth:`StateCache.refresh` applies
them to the held entries when the batch ends, so an entry is never dirty and eviction never has to
keep one (the TAC paper's eviction buffer is not needed).
"""

from __future__ import annotations

import itertools
import threading
from numbers import Integral
from typing import Any, Final, Iterable, Sequence

from common.cache_contract import MISSING, CacheStats

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
    """A byte-bounded cache of clean entries with an eviction order and statistics.

    Thread-safe: prefetch threads fill and renew while the batch thread reads. Reads, fills and
    renewals cost O(log n) per key (TAC) or O(1) (LRU, Clock), amortized; :meth:`refresh` costs one
    dict lookup per changed key and, when the batch deleted ranges, one pass over the cache.
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
        self._prefetched: set[bytes] = set()  # filled by prefetching, not read yet
        self._refreshes: list[tuple[dict[bytes, bytes | None], Sequence[tuple[bytes, bytes]]]] = []
        self._bytes = 0

    # ------------------------------------------------------------------ reads
    def get_many(self, keys: Sequence[bytes], ts: int | Sequence[int] = 0) -> list[Any]:
        """Per key: its value (bytes or None) or ``MISSING``; ``ts`` is each access's event time.

        A hit records the access: TAC sets the entry's timestamp to ``ts``, LRU makes it the most
        recent, Clock sets its reference bit.
        """
        out: list[Any] = []
        with self._lock:
            self._settle()
            values, touch, prefetched = self._values, self._order.touch, self._prefetched
            for key, t in zip(keys, _stamps(ts, len(keys))):
                value = values.get(key, MISSING)
                out.append(value)
                if value is MISSING:
                    continue
                touch(key, t)
                if key in prefetched:
                    prefetched.discard(key)
                    self.stats.prefetched_entries_read += 1
            misses = out.count(MISSING)
            self.stats.misses += misses
            self.stats.hits += len(out) - misses
        return out

    def contains(self, key: bytes) -> bool:
        """Whether a read of ``key`` would hit."""
        return self.contains_many([key])[0]

    def contains_many(self, keys: Sequence[bytes]) -> list[bool]:
        """Per key, whether a read of it would hit; one lock for all."""
        with self._lock:
            self._settle()
            values = self._values
            return [key in values for key in keys]

    # ------------------------------------------------------------------ fills, hints
    def fill(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        ts: int | Sequence[int],
        *,
        prefetched: bool = False,
    ) -> int:
        """Add entries fetched below the cache; returns how many were inserted.

        A key the cache already holds keeps its entry, which is as new or newer. ``prefetched`` marks
        entries filled from hints (``ts``: the hints' future event times); for one the cache already
        holds, the hint renews it (:meth:`renew`).
        """
        _check_values(values, len(keys))
        inserted = 0
        with self._lock:
            self._settle()
            held = self._values
            for key, value, t in zip(keys, values, _stamps(ts, len(keys))):
                if key in held:
                    if prefetched:
                        self._order.renew(key, t)
                    continue
                self._insert(key, value, t)
                inserted += 1
                if prefetched:
                    self._prefetched.add(key)
            if prefetched:
                self.stats.prefetched_entries += inserted
            self._evict()
        return inserted

    def renew(self, keys: Sequence[bytes], ts: int | Sequence[int]) -> int:
        """New hints for held keys; returns how many were held.

        TAC raises an entry's timestamp to ``ts`` (never lowers it), LRU and Clock count a use.
        """
        renewed = 0
        with self._lock:
            self._settle()
            held, renew = self._values, self._order.renew
            for key, t in zip(keys, _stamps(ts, len(keys))):
                if key in held:
                    renew(key, t)
                    renewed += 1
        return renewed

    # ------------------------------------------------------------------ the batch's end
    def refresh(self, changes: dict[bytes, bytes | None], ranges: Sequence[tuple[bytes, bytes]]) -> None:
        """The batch's deleted ranges drop the entries in them, then its changes replace the values of
        the keys held (a key not held is not added: what the batch wrote without reading it, such as
        timers, is rarely read). The order is left as the batch's reads and hints set it.

        O(1) here: the refresh is applied before the cache's next operation, by whichever thread makes
        it (mostly the next batch's hints, while the driver waits for the trigger), not by the batch's
        thread. ``changes`` must not change afterwards (a commit buffer's do not).
        """
        with self._lock:
            self._refreshes.append((changes, ranges))

    def clear(self) -> None:
        """Forget everything (the state was reloaded)."""
        with self._lock:
            self.stats.prefetched_entries_unread += len(self._prefetched)
            self._order = eviction_order(self.policy)
            self._values, self._prefetched, self._refreshes = {}, set(), []
            self._bytes = 0

    # ------------------------------------------------------------------ inspection
    @property
    def bytes_cached(self) -> int:
        """Bytes of the cached entries; at most ``max_bytes``."""
        with self._lock:
            self._settle()
            return self._bytes

    def __len__(self) -> int:
        """Cached entries."""
        with self._lock:
            self._settle()
            return len(self._values)

    def items(self) -> list[tuple[bytes, bytes | None]]:
        """Every entry, in no order."""
        with self._lock:
            self._settle()
            return list(self._values.items())

    # ------------------------------------------------------------------ internals (lock held)
    def _settle(self) -> None:
        """Apply the refreshes queued since the last operation."""
        if not self._refreshes:
            return
        refreshes, self._refreshes = self._refreshes, []
        held = self._values
        for changes, ranges in refreshes:
            for begin, end in ranges:
                for key in [k for k in held if begin <= k < end]:
                    self._drop(key)
                    self._order.remove(key)
            for key in [k for k in changes if k in held]:
                value = changes[key]
                self._bytes += len(value or b"") - len(held[key] or b"")  # the key's size is unchanged
                held[key] = value
        self._evict()
        self._order.tidy()

    def _insert(self, key: bytes, value: bytes | None, ts: int) -> None:
        self._values[key] = value
        self._bytes += _size(key, value)
        self._order.insert(key, ts)

    def _drop(self, key: bytes) -> None:
        """Remove an entry (the order is the caller's business); a prefetched one never read was wasted."""
        self._bytes -= _size(key, self._values.pop(key))
        if key in self._prefetched:
            self._prefetched.discard(key)
            self.stats.prefetched_entries_unread += 1

    def _evict(self) -> None:
        """Evict the order's victims until the cached bytes fit."""
        while self._bytes > self.max_bytes:
            self._drop(self._order.victim())
            self.stats.evictions += 1
