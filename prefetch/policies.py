"""Eviction orders for the state cache: timestamp-aware (TAC), LRU and Clock.

An order only knows keys and when they were used; the cache owns values, sizes and dirtiness and
tells the order about every entry that enters, is used or leaves. ``victim()`` names (and removes)
the key to evict next. The cache inserts an operation's new entries first and then evicts while it
is over capacity, so new entries are candidates like any other. Every operation is O(1) (LRU,
Clock, amortized) or O(log n) (TAC, amortized).
"""
from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from typing import Protocol


class EvictionOrder(Protocol):
    """What the cache needs from an eviction order."""

    def insert(self, key: bytes, ts: int) -> None:
        """A new entry, for event time ``ts`` (an access, or a prefetched entry's future hint time)."""

    def touch(self, key: bytes, ts: int) -> None:
        """A read or update of an entry at event time ``ts``."""

    def renew(self, key: bytes, ts: int) -> None:
        """A new hint for an entry: it will be accessed at event time ``ts``."""

    def remove(self, key: bytes) -> None:
        """The entry left the cache for another reason than eviction (deleted)."""

    def victim(self) -> bytes:
        """The next key to evict, removed from the order; the order must not be empty."""

    def tidy(self) -> None:
        """Batch boundary (the cache is drained): drop bookkeeping nothing needs, off the read path."""


class TimestampOrder:
    """TAC: the entry with the smallest event timestamp goes first (ties: the older stamp first).

    A read or update *sets* the timestamp to the access's event time; a hint only raises it. A
    min-heap with lazy invalidation: a re-stamped key pushes a new item and its old items are
    skipped when they surface. :meth:`tidy` rebuilds the heap at the batch boundary when stale
    items outnumber the live ones (about 10 ms for 10,000 entries, which would otherwise land on
    some batch's reads); within a batch only a heap grown far beyond that is rebuilt at once.
    """

    def __init__(self) -> None:
        self._live: dict[bytes, tuple[int, int]] = {}  # key -> (ts, sequence number of its live heap item)
        self._heap: list[tuple[int, int, bytes]] = []
        self._seq = itertools.count()

    def insert(self, key: bytes, ts: int) -> None:
        seq = next(self._seq)
        self._live[key] = (ts, seq)
        heapq.heappush(self._heap, (ts, seq, key))
        if len(self._heap) > 4 * len(self._live) + 65536:  # bounds memory in a very large batch
            self._rebuild()

    touch = insert

    def tidy(self) -> None:
        if len(self._heap) > 2 * len(self._live) + 1024:
            self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(t, s, k) for k, (t, s) in self._live.items()]
        heapq.heapify(self._heap)

    def renew(self, key: bytes, ts: int) -> None:
        if ts > self._live[key][0]:
            self.insert(key, ts)

    def remove(self, key: bytes) -> None:
        del self._live[key]

    def victim(self) -> bytes:
        while True:
            ts, seq, key = heapq.heappop(self._heap)
            if self._live.get(key) == (ts, seq):
                del self._live[key]
                return key


class LruOrder:
    """LRU: the least recently used entry goes first; a hint counts as a use (timestamps are ignored)."""

    def __init__(self) -> None:
        self._keys: OrderedDict[bytes, None] = OrderedDict()  # least recently used first

    def insert(self, key: bytes, ts: int) -> None:
        self._keys[key] = None

    def touch(self, key: bytes, ts: int) -> None:
        self._keys.move_to_end(key)

    renew = touch

    def remove(self, key: bytes) -> None:
        del self._keys[key]

    def victim(self) -> bytes:
        return self._keys.popitem(last=False)[0]

    def tidy(self) -> None:
        """Nothing to tidy: the order holds live keys only."""


class ClockOrder:
    """Clock (second chance): a hand sweeps a ring of entries, each with a reference bit.

    A use (or a hint) sets the entry's bit. To find a victim the hand clears set bits as it passes
    and evicts the first entry whose bit is clear, so a used entry gets one second chance. A new
    entry joins the ring just behind the hand, where the hand comes last, with its bit set (every
    entry enters on a use: a read, a write or a hinted read soon). The ring is kept as an ordered
    dict that starts at the hand: the hand passing an entry moves it to the end.
    """

    def __init__(self) -> None:
        self._ring: OrderedDict[bytes, bool] = OrderedDict()  # from the hand on: key -> reference bit

    def touch(self, key: bytes, ts: int) -> None:
        self._ring[key] = True  # a new key is appended: just behind the hand

    insert = renew = touch

    def remove(self, key: bytes) -> None:
        del self._ring[key]

    def victim(self) -> bytes:
        while True:
            key, referenced = self._ring.popitem(last=False)
            if not referenced:
                return key
            self._ring[key] = False  # second chance: the hand moves past it, clearing its bit

    def tidy(self) -> None:
        """Nothing to tidy: the ring holds live keys only."""


ORDERS: dict[str, type[EvictionOrder]] = {"tac": TimestampOrder, "lru": LruOrder, "clock": ClockOrder}


def eviction_order(policy: str) -> EvictionOrder:
    """A new, empty order of the policy named ``policy`` (one of :data:`ORDERS`)."""
    if policy not in ORDERS:
        raise ValueError(f"policy must be one of {', '.join(ORDERS)}, not {policy!r}")
    return ORDERS[policy]()
