"""The Java DataSketches frequent-items sketch (``ItemsSketch``) that Spark's ``approx_top_k`` family keeps,
ported so that misa merges it as Spark does: the same hash map (linear probing over Java's ``hashCode`` of each
item, grown by doubling, purged by a sampled median once full), the same iteration (golden-ratio strides), the
same image (Java's preamble, counts, then the items through Spark's serializer of the column's type).

Ties in count come out in the order of the map, which depends on each item's Java hash and on the order of the
updates; misa repeats Spark's updates in Spark's order (:mod:`.approx_top_k`), so it gives Spark's ties.

An item is held by its Java identity, hashed and serialized as Java does for its type (:mod:`.java_items`).
"""

from __future__ import annotations

import math
import struct
from typing import Any, Callable, Iterator

from misa.operators.java_items import MASK64, ItemType

LG_MIN_MAP_SIZE, SAMPLE_SIZE, LOAD_FACTOR = 3, 1024, 0.75
GOLDEN_RATIO_RECIPROCAL = (math.sqrt(5) - 1) / 2
FAMILY, SERIAL_VERSION, EMPTY_FLAGS, PREAMBLE_LONGS = 10, 1, 5, 4


def _mix(hash_code: int) -> int:
    """DataSketches' ``Util.hash`` (MurmurHash3's finalizer) of an int hash code widened to a long."""
    key = hash_code & MASK64
    key ^= key >> 33
    key = (key * 0xFF51AFD7ED558CCD) & MASK64
    key ^= key >> 33
    key = (key * 0xC4CEB9FE1A85EC53) & MASK64
    return key ^ (key >> 33)


class _ReversePurgeMap:
    """Java's ``ReversePurgeItemHashMap``: linear probing, each slot's drift from its home kept as its state."""

    def __init__(self, size: int, hash_of: Callable[[Any], int]):
        self.hash_of = hash_of
        self.keys: list[Any] = [None] * size
        self.values = [0] * size
        self.states = [0] * size
        self.active = 0
        self.lg_length = size.bit_length() - 1
        self.capacity = int(size * LOAD_FACTOR)

    def adjust(self, key: Any, amount: int) -> None:
        """``adjustOrPutValue``."""
        mask = len(self.keys) - 1
        probe = _mix(self.hash_of(key)) & mask
        drift = 1
        while self.states[probe] != 0 and self.keys[probe] != key:
            probe = (probe + 1) & mask
            drift += 1
        if self.states[probe] == 0:
            self.keys[probe], self.values[probe], self.states[probe] = key, amount, drift
            self.active += 1
        else:
            self.values[probe] += amount

    def resize(self, size: int) -> None:
        """The active entries put again, in slot order, into ``size`` slots."""
        old = [(k, v) for k, v, s in zip(self.keys, self.values, self.states) if s > 0]
        self.__init__(size, self.hash_of)  # type: ignore[misc]
        for key, value in old:
            self.adjust(key, value)

    def purge(self, sample_size: int) -> int:
        """Every count lowered by the median of the first ``sample_size`` active counts; the non-positive dropped."""
        limit = min(sample_size, self.active)
        samples = [v for v, s in zip(self.values, self.states) if s > 0][:limit]
        median = sorted(samples)[limit // 2]
        self.values = [v - median for v in self.values]
        self._keep_only_positive_counts()
        return median

    def _keep_only_positive_counts(self) -> None:
        """Java's deletion order: from the last empty slot down, then the wrapped cluster at the top."""
        first = len(self.states) - 1
        while self.states[first] > 0:
            first -= 1
        for probe in [*range(first - 1, -1, -1), *range(len(self.states) - 1, first - 1, -1)]:
            if self.states[probe] > 0 and self.values[probe] <= 0:
                self._delete(probe)
                self.active -= 1

    def _delete(self, deleted: int) -> None:
        """``hashDelete``: the slot emptied, later entries of its cluster moved back toward their homes."""
        self.states[deleted] = 0
        drift, mask = 1, len(self.keys) - 1
        probe = (deleted + drift) & mask
        while self.states[probe] != 0:
            if self.states[probe] > drift:
                self.keys[deleted], self.values[deleted] = self.keys[probe], self.values[probe]
                self.states[deleted] = self.states[probe] - drift
                self.states[probe] = 0
                drift, deleted = 0, probe
            probe = (probe + 1) & mask
            drift += 1

    def strided(self) -> Iterator[tuple[Any, int]]:
        """The active entries in the golden-ratio stride order of Java's iterator (its merges and listings)."""
        size = len(self.keys)
        stride, mask = int(size * GOLDEN_RATIO_RECIPROCAL) | 1, size - 1
        i, seen = -stride, 0
        while seen < self.active:
            i = (i + stride) & mask
            while self.states[i] <= 0:
                i = (i + stride) & mask
            seen += 1
            yield self.keys[i], self.values[i]

    def in_slot_order(self) -> list[tuple[Any, int]]:
        return [(k, v) for k, v, s in zip(self.keys, self.values, self.states) if s > 0]


class FrequentItems:
    """Java's ``ItemsSketch`` of at most ``2 ** lg_max`` map slots."""

    def __init__(self, items: ItemType, lg_max: int, lg_current: int = LG_MIN_MAP_SIZE):
        self.items = items
        self.lg_max = max(lg_max, LG_MIN_MAP_SIZE)
        self.map = _ReversePurgeMap(1 << max(lg_current, LG_MIN_MAP_SIZE), items.hash)
        self.current_capacity = self.map.capacity
        self.sample_size = min(SAMPLE_SIZE, int((1 << lg_max) * LOAD_FACTOR))
        self.offset = 0
        self.weight = 0

    def update(self, item: Any, count: int = 1) -> None:
        if count == 0:
            return
        self.weight += count
        self.map.adjust(item, count)
        if self.map.active > self.current_capacity:
            if self.map.lg_length < self.lg_max:
                self.map.resize(2 << self.map.lg_length)
                self.current_capacity = self.map.capacity
            else:
                self.offset += self.map.purge(self.sample_size)

    def merge(self, other: FrequentItems) -> None:
        """``merge``: the other's entries updated into this one in its iterator's order."""
        if not other.map.active:
            return
        weight = self.weight + other.weight
        for item, count in other.map.strided():
            self.update(item, count)
        self.offset += other.offset
        self.weight = weight

    def frequent(self) -> list[tuple[Any, int]]:
        """``getFrequentItems(NO_FALSE_POSITIVES)``: (item, estimate) by estimate, descending, ties in map order."""
        rows = [(item, count + self.offset) for item, count in self.map.strided() if count >= self.offset]
        return sorted(rows, key=lambda row: -row[1])

    def to_bytes(self) -> bytes:
        """``toByteArray``: the preamble, then the active counts and items in slot order."""
        if not self.map.active:
            return struct.pack("<6BH", 1, SERIAL_VERSION, FAMILY, self.lg_max, self.map.lg_length, EMPTY_FLAGS, 0)
        entries = self.map.in_slot_order()
        preamble = struct.pack("<6BH", PREAMBLE_LONGS, SERIAL_VERSION, FAMILY, self.lg_max, self.map.lg_length, 0, 0)
        preamble += struct.pack("<iiqq", len(entries), 0, self.weight, self.offset)
        counts = struct.pack(f"<{len(entries)}q", *(count for _, count in entries))
        return preamble + counts + self.items.write([item for item, _ in entries])

    @classmethod
    def from_bytes(cls, items: ItemType, image: bytes) -> FrequentItems:
        """``getInstance``: a sketch of the image's sizes, its entries updated in the image's order."""
        pre_longs, serial, family, lg_max, lg_current, flags = image[:6]
        if (pre_longs & 0x3F) not in (1, PREAMBLE_LONGS) or serial != SERIAL_VERSION or family != FAMILY:
            raise ValueError(f"not a frequent-items sketch image (preamble {image[:8].hex()})")
        if flags & EMPTY_FLAGS:
            return cls(items, lg_max)
        sketch = cls(items, lg_max, lg_current)
        active, _, weight, sketch.offset = struct.unpack_from("<iiqq", image, 8)
        counts = struct.unpack_from(f"<{active}q", image, 32)
        for item, count in zip(items.read(image, 32 + 8 * active, active), counts):
            sketch.update(item, count)
        sketch.weight = weight  # Java's: the image's, not the updates' sum
        return sketch
