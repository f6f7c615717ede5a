"""Eviction orders for the state cache: timestamp-aware (TAC), LRU and Clock.

An order only knows keys and when they were used; the cache owns values, sizes and dirtiness.
Each order answers ``victim()``: the key to evict next (removed from the order).
"""
from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from typing import Protocol


class EvictionOrder(Protocol):
    def insert(self, key: bytes, ts: int) -> None:
        """A new entry, used at event time ``ts`` (a prefetched entry: its hint's future time)."""

    def touch(self, key: bytes, ts: int) -> None:
        """A read or update of a cached entry at event time ``ts``."""

    def renew(self, key: bytes, ts: int) -> None:
        """A new hint for a cached entry, for a future access at ``ts``."""

    def remove(self, key: bytes) -> None:
        """The entry left the cache for another reason (deleted)."""

    def victim(self) -> bytes:
        """The next key to evict; it is removed from the order."""


class TimestampOrder:
    """TAC: the entry with the smallest event timestamp goes first.

    A read or update sets the timestamp to the access's event time; a hint can only raise it. A
    heap with lazy invalidation: superseded heap items are skipped when popped, and the heap is
    rebuilt when stale items outnumber live ones.
    """

    def __init__(self) -> None:
        self._ts: dict[bytes, tuple[int, int]] = {}  # key -> (ts, sequence of its live heap item)
        self._heap: list[tuple[int, int, bytes]] = []
        self._seq = itertools.count()

    def _push(self, key: bytes, ts: int) -> None:
        seq = next(self._seq)
        self._ts[key] = (ts, seq)
        heapq.heappush(self._heap, (ts, seq, key))
        if len(self._heap) > 2 * len(self._ts) + 1024:
            self._heap = [(t, s, k) for k, (t, s) in self._ts.items()]
            heapq.heapify(self._heap)

    def insert(self, key: bytes, ts: int) -> None:
        self._push(key, ts)

    touch = insert

    def renew(self, key: bytes, ts: int) -> None:
        if ts > self._ts[key][0]:
            self._push(key, ts)

    def remove(self, key: bytes) -> None:
        del self._ts[key]

    def victim(self) -> bytes:
        while True:
            ts, seq, key = heapq.heappop(self._heap)
            if self._ts.get(key) == (ts, seq):
                del self._ts[key]
                return key


class LruOrder:
    """LRU: the least recently used entry goes first (timestamps are ignored)."""

    def __init__(self) -> None:
        self._keys: OrderedDict[bytes, None] = OrderedDict()

    def insert(self, key: bytes, ts: int) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)

    def touch(self, key: bytes, ts: int) -> None:
        self._keys.move_to_end(key)

    renew = touch

    def remove(self, key: bytes) -> None:
        del self._keys[key]

    def victim(self) -> bytes:
        return self._keys.popitem(last=False)[0]


class ClockOrder:
    """Clock (second chance): a hand sweeps a ring; a used entry loses its reference bit and stays once."""

    def __init__(self) -> None:
        self._ring: list[bytes | None] = []
        self._slot: dict[bytes, int] = {}
        self._referenced: set[bytes] = set()
        self._hand = 0

    def insert(self, key: bytes, ts: int) -> None:
        self._slot[key] = len(self._ring)
        self._ring.append(key)

    def touch(self, key: bytes, ts: int) -> None:
        self._referenced.add(key)

    renew = touch

    def remove(self, key: bytes) -> None:
        self._ring[self._slot.pop(key)] = None
        self._referenced.discard(key)
        if len(self._ring) > 2 * len(self._slot) + 1024:
            self._compact()

    def victim(self) -> bytes:
        while True:
            if self._hand >= len(self._ring):
                self._compact()
            key = self._ring[self._hand]
            if key is not None and key not in self._referenced:
                self._ring[self._hand] = None
                del self._slot[key]
                self._hand += 1
                return key
            if key is not None:
                self._referenced.discard(key)
            self._hand += 1

    def _compact(self) -> None:
        """Drop empty slots; the hand keeps its place among the live keys (wrapping at the end)."""
        before = sum(1 for k in self._ring[:self._hand] if k is not None)
        self._ring = [k for k in self._ring if k is not None]
        self._slot = {k: i for i, k in enumerate(self._ring)}
        self._hand = before if before < len(self._ring) else 0


def eviction_order(policy: str) -> EvictionOrder:
    """The order named ``policy`` (tac, lru or clock)."""
    orders = {"tac": TimestampOrder, "lru": LruOrder, "clock": ClockOrder}
    if policy not in orders:
        raise ValueError(f"policy {policy!r}: use one of {', '.join(orders)}")
    return orders[policy]()
