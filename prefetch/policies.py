"""Eviction orders for the state cache: timestamp-aware (TAC), LRU and Clock.

An order only knows keys and when they were used; the cache owns values, sizes and dirtiness and
tells the order about every entry that enters, is used or leaves. ``victim()`` names (and removes)
the key to evict next. The cache inserts an operation's new entries first and then evicts while it
is over capacity, so new entries are candidates like any other. Every operation is O(1) (LRU,
Clock, amortized) or O(log n) (TAC, amortized).
"""

from __future__ import annotations

import heapq
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

    A read or update *sets* the timestamp to the access's event time; a hint only raises it. Keys
    are kept in one bucket per distinct timestamp, each bucket in stamp order (an ordered dict),
    and a min-heap holds the timestamps that have a bucket. A re-stamp moves the key to the end of
    its new bucket in O(1) dict operations; only a timestamp seen for the first time costs a heap
    push (of an int), so the heap works per distinct timestamp, not per access. A bucket a re-stamp
    emptied stays until it surfaces in :meth:`victim` or :meth:`tidy` drops it at the batch boundary.
    """

    def __init__(self) -> None:
        self._stamp: dict[bytes, int] = {}  # key -> its timestamp
        self._buckets: dict[int, OrderedDict[bytes, None]] = {}  # timestamp -> its keys, oldest stamp first
        self._heap: list[int] = []  # the timestamps of self._buckets

    def insert(self, key: bytes, ts: int) -> None:
        bucket = self._buckets.get(ts)
        if bucket is None:
            bucket = self._buckets[ts] = OrderedDict()
            heapq.heappush(self._heap, ts)
        bucket[key] = None
        self._stamp[key] = ts

    def touch(self, key: bytes, ts: int) -> None:
        old = self._stamp[key]
        if old == ts:  # a write after its read, mostly: the newest stamp of its bucket
            self._buckets[ts].move_to_end(key)
        else:
            del self._buckets[old][key]
            self.insert(key, ts)

    def renew(self, key: bytes, ts: int) -> None:
        if ts > self._stamp[key]:
            self.touch(key, ts)

    def remove(self, key: bytes) -> None:
        del self._buckets[self._stamp.pop(key)][key]

    def victim(self) -> bytes:
        while True:
            bucket = self._buckets[self._heap[0]]
            if bucket:
                key = bucket.popitem(last=False)[0]
                del self._stamp[key]
                return key
            del self._buckets[heapq.heappop(self._heap)]

    def tidy(self) -> None:
        if len(self._buckets) > 2 * len(self._stamp) + 1024:  # mostly emptied buckets
            self._buckets = {ts: bucket for ts, bucket in self._buckets.items() if bucket}
            self._heap = list(self._buckets)
            heapq.heapify(self._heap)


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
