"""The state cache: the Timestamp-Aware Cache (or an LRU / Clock baseline) and the batch's write buffer.

Entries are (value, dirty) with a place in an eviction order (:mod:`prefetch.policies`). A value of
None means "the key has no value" (a negative entry). Capacity is in bytes: key, value and
:data:`ENTRY_OVERHEAD` per entry. When it is exceeded the order's victims are evicted; a dirty
victim moves to the *eviction buffer*, where reads still find it, until the commit drains it.
Writes of a batch are one dirty entry per key (the write-dedup buffer of Kafka's KIP-63), and
:meth:`StateCache.drain` hands them to the commit.

Range deletes: :meth:`StateCache.delete_range` drops every entry in the range (cached, dirty or in
the eviction buffer) and records the range; until the next drain, a read of a key in it is None.
Puts after the range delete survive: the commit applies the batch's range deletes first, then its
puts.
"""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, fields
from typing import Any, Final, Sequence

from .policies import eviction_order


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final[Any] = _Missing()
"""What a read returns for a key the cache knows nothing about."""
POLICIES = ("tac", "lru", "clock")
ENTRY_OVERHEAD = 64  # bytes counted per entry besides its key and value


@dataclass
class CacheStats:
    """Counters since the last :meth:`take`."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    dirty_evictions: int = 0     # evictions into the eviction buffer
    prefetched: int = 0          # entries filled by prefetching
    prefetch_hits: int = 0       # first reads of prefetched entries
    wasted_prefetches: int = 0   # prefetched entries evicted or deleted before any read

    def take(self) -> dict[str, int]:
        """The counters as a dict; they restart from zero."""
        out = asdict(self)
        for f in fields(self):
            setattr(self, f.name, 0)
        return out


def _size(key: bytes, value: bytes | None) -> int:
    return len(key) + (len(value) if value is not None else 0) + ENTRY_OVERHEAD


def _stamps(ts: int | Sequence[int], n: int) -> Sequence[int]:
    return [int(ts)] * n if isinstance(ts, int) else ts


class StateCache:
    """A byte-bounded state cache with dirty tracking and an eviction buffer; thread-safe."""

    def __init__(self, max_bytes: int, policy: str = "tac"):
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        if policy not in POLICIES:
            raise ValueError(f"policy {policy!r}: use one of {', '.join(POLICIES)}")
        self.max_bytes = max_bytes
        self.policy = policy
        self.stats = CacheStats()
        self._order = eviction_order(policy)
        self._values: dict[bytes, bytes | None] = {}
        self._dirty: set[bytes] = set()
        self._prefetched: set[bytes] = set()  # prefetched, not read yet
        self._evicted: dict[bytes, bytes | None] = {}  # the eviction buffer: dirty victims
        self._ranges: list[tuple[bytes, bytes]] = []   # deleted since the last drain
        self._bytes = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ reads
    def get_many(self, keys: Sequence[bytes], ts: int | Sequence[int] = 0) -> list[Any]:
        """Per key: its value (bytes or None) or :data:`MISSING`; a hit records the access at ``ts``."""
        out: list[Any] = []
        with self._lock:
            for key, t in zip(keys, _stamps(ts, len(keys))):
                if key in self._values:
                    self._order.touch(key, int(t))
                    if key in self._prefetched:
                        self._prefetched.discard(key)
                        self.stats.prefetch_hits += 1
                    out.append(self._values[key])
                elif key in self._evicted:
                    out.append(self._evicted[key])
                elif self._deleted(key):
                    out.append(None)
                else:
                    out.append(MISSING)
                    self.stats.misses += 1
                    continue
                self.stats.hits += 1
        return out

    def contains(self, key: bytes) -> bool:
        with self._lock:
            return key in self._values or key in self._evicted

    def _deleted(self, key: bytes) -> bool:
        return any(begin <= key < end for begin, end in self._ranges)

    # ------------------------------------------------------------------ clean entries
    def fill(self, keys: Sequence[bytes], values: Sequence[bytes | None], ts: int | Sequence[int],
             *, prefetched: bool = False) -> int:
        """Add clean entries read below the cache; a key the cache already knows is left as it is."""
        inserted = 0
        with self._lock:
            for key, value, t in zip(keys, values, _stamps(ts, len(keys))):
                if key in self._values or key in self._evicted or self._deleted(key):
                    continue
                self._insert(key, value, int(t))
                inserted += 1
                if prefetched:
                    self._prefetched.add(key)
            if prefetched:
                self.stats.prefetched += inserted
            self._evict()
        return inserted

    def renew(self, keys: Sequence[bytes], ts: int | Sequence[int]) -> int:
        """A new hint for cached keys: TAC raises their timestamps; returns how many were cached."""
        renewed = 0
        with self._lock:
            for key, t in zip(keys, _stamps(ts, len(keys))):
                if key in self._values:
                    self._order.renew(key, int(t))
                    renewed += 1
        return renewed

    # ------------------------------------------------------------------ the batch's writes
    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None], ts: int | Sequence[int] = 0) -> None:
        """The batch's new values (None deletes): one dirty entry per key."""
        with self._lock:
            for key, value, t in zip(keys, values, _stamps(ts, len(keys))):
                if key in self._values:
                    self._bytes += _size(key, value) - _size(key, self._values[key])
                    self._values[key] = value
                    self._order.touch(key, int(t))
                    self._prefetched.discard(key)
                else:
                    self._evicted.pop(key, None)  # superseded by this write
                    self._insert(key, value, int(t))
                self._dirty.add(key)
            self._evict()

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete [begin, end) as of this batch (see the module docstring)."""
        with self._lock:
            for key in [k for k in self._values if begin <= k < end]:
                self._drop(key)
                self._order.remove(key)
            for key in [k for k in self._evicted if begin <= k < end]:
                del self._evicted[key]
            self._ranges.append((begin, end))

    def drain(self) -> tuple[dict[bytes, bytes | None], list[tuple[bytes, bytes]]]:
        """The batch's changes for the commit: dirty entries and the eviction buffer, and the range deletes.

        Cached entries stay, now clean; the eviction buffer and the recorded ranges are emptied.
        """
        with self._lock:
            changes = dict(self._evicted)
            changes.update((key, self._values[key]) for key in self._dirty)
            ranges = self._ranges
            self._dirty, self._evicted, self._ranges = set(), {}, []
        return changes, ranges

    def clear(self) -> None:
        """Forget everything (the state was reloaded)."""
        with self._lock:
            self._order = eviction_order(self.policy)
            self._values, self._dirty, self._prefetched, self._evicted, self._ranges = {}, set(), set(), {}, []
            self._bytes = 0

    # ------------------------------------------------------------------ sizes
    @property
    def bytes_cached(self) -> int:
        return self._bytes

    @property
    def dirty_count(self) -> int:
        return len(self._dirty) + len(self._evicted)

    @property
    def eviction_buffer_bytes(self) -> int:
        with self._lock:
            return sum(_size(k, v) for k, v in self._evicted.items())

    def __len__(self) -> int:
        return len(self._values)

    def items(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes | None]]:
        """Every entry the cache holds in [begin, end), cached or in the eviction buffer."""
        with self._lock:
            found = {k: v for k, v in self._values.items() if begin <= k < end}
            found.update((k, v) for k, v in self._evicted.items() if begin <= k < end)
        return list(found.items())

    @property
    def deleted_ranges(self) -> list[tuple[bytes, bytes]]:
        """Ranges deleted since the last drain."""
        with self._lock:
            return list(self._ranges)

    # ------------------------------------------------------------------ internals (lock held)
    def _insert(self, key: bytes, value: bytes | None, ts: int) -> None:
        self._values[key] = value
        self._bytes += _size(key, value)
        self._order.insert(key, ts)

    def _drop(self, key: bytes) -> bytes | None:
        """Remove a cached entry (not from the order); a prefetched one never read was wasted."""
        value = self._values.pop(key)
        self._bytes -= _size(key, value)
        self._dirty.discard(key)
        if key in self._prefetched:
            self._prefetched.discard(key)
            self.stats.wasted_prefetches += 1
        return value

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._values:
            key = self._order.victim()
            dirty = key in self._dirty
            value = self._drop(key)
            self.stats.evictions += 1
            if dirty:
                self._evicted[key] = value
                self.stats.dirty_evictions += 1
