"""How the memory tier stores a held space's entries: one dict, or one dict per window.

A space keyed by window (every key starts with its window's end, as an interval join's buckets do) keeps a dict per
window, the window-aware layout of FlowKV (``../shared/papers/``): the watermark's range delete of closed windows
drops their dicts whole instead of finding and popping each key in one large dict, and a batch's puts go to the few
small dicts of its open windows. Reads and puts work on whole key lists (a ``map`` over a dict, keys grouped by
window with Arrow); Python per key only finds a batch's deletes among its changes and the keys of a window that a
range cuts.
"""

from __future__ import annotations

import collections
import operator
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FEW_WINDOWS = 8  # up to this many windows, a key list is split by one mask per window rather than by a sort


class FlatEntries:
    """A space's entries in one dict; a range delete finds its keys by a scan (operators delete such spaces by key)."""

    def __init__(self) -> None:
        self._entries: dict[bytes, bytes] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Hold ``items`` (a load's chunk)."""
        self._entries.update(items)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return list(map(self._entries.get, keys))

    def apply(self, changes: dict[bytes, bytes | None]) -> None:
        """A batch's puts (None: delete)."""
        self._entries.update(changes)  # type: ignore[arg-type]  # the deleted ones go next
        collections.deque(map(self._entries.pop, [k for k, v in changes.items() if v is None]), 0)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        collections.deque(map(self._entries.pop, [k for k in self._entries if begin <= k < end]), 0)


class WindowedEntries:
    """A space's entries in one dict per window (a key's first ``width`` bytes)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._windows: dict[bytes, dict[bytes, bytes]] = {}

    def __len__(self) -> int:
        return sum(map(len, self._windows.values()))

    @property
    def windows(self) -> list[bytes]:
        """The windows held, in key order."""
        return sorted(self._windows)

    def add(self, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Hold ``items`` (a load's chunk)."""
        keys, values = zip(*items) if items else ((), ())
        for window, positions in by_window(keys, self.width):
            self._windows.setdefault(window, {}).update(zip(pick(keys, positions), pick(values, positions)))

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        groups = by_window(keys, self.width)
        if len(groups) == 1:
            return list(map(self._windows.get(groups[0][0], {}).get, keys))
        values = np.full(len(keys), None, dtype=object)
        for window, positions in groups:
            held = self._windows.get(window)
            if held is not None:
                values[positions] = np.fromiter(map(held.get, pick(keys, positions)), object, len(positions))
        return values.tolist()

    def apply(self, changes: dict[bytes, bytes | None]) -> None:
        """A batch's puts (None: delete), window by window."""
        keys, values = list(changes), list(changes.values())
        groups = by_window(keys, self.width)
        for window, positions in groups:
            held = self._windows.setdefault(window, {})
            window_changes = changes if len(groups) == 1 else dict(zip(pick(keys, positions), pick(values, positions)))
            held.update(window_changes)  # type: ignore[arg-type]  # the deleted ones go next
            collections.deque(map(held.pop, [k for k, v in window_changes.items() if v is None]), 0)
            if not held:
                del self._windows[window]

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Drop the windows inside [begin, end) whole; delete the range's keys of a window it cuts one by one."""
        width = self.width
        for window in [w for w in self._windows if begin[:width] <= w <= end[:width]]:
            if begin <= window and window < end[:width]:  # every key of the window lies in the range
                del self._windows[window]
                continue
            held = self._windows[window]
            collections.deque(map(held.pop, [k for k in held if begin <= k < end]), 0)
            if not held:
                del self._windows[window]


def by_window(keys: Sequence[bytes], width: int) -> list[tuple[bytes, np.ndarray]]:
    """The positions in ``keys`` of each window's keys (their first ``width`` bytes), grouped by Arrow."""
    if not keys:
        return []
    windows = pc.binary_slice(pa.array(keys, pa.binary()), 0, width).dictionary_encode()
    group = windows.indices.to_numpy()
    if len(windows.dictionary) == 1:
        return [(windows.dictionary[0].as_py(), np.arange(len(keys)))]
    if len(windows.dictionary) <= FEW_WINDOWS:  # a batch's keys mostly fall in a few open windows
        return [
            (window, np.flatnonzero(group == number)) for number, window in enumerate(windows.dictionary.to_pylist())
        ]
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(len(windows.dictionary) + 1))
    return [
        (window, order[bounds[number] : bounds[number + 1]])
        for number, window in enumerate(windows.dictionary.to_pylist())
    ]


def pick(items: Sequence, positions: np.ndarray) -> Sequence:
    """``items`` at ``positions``, in that order (a C loop; a tuple)."""
    if len(positions) == 1:
        return (items[int(positions[0])],)
    return operator.itemgetter(*positions.tolist())(items)
