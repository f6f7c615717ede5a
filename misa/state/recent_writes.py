"""The state's hot tier: the values the last batches wrote, kept in memory after their commit so that the next
batches' point reads of them need no RocksDB look-up.

Batches mostly read what recent batches wrote: a session's record when its next row comes or when the watermark
closes it, a join key's rows when their eviction time comes, a key seen a batch ago. Each frozen version's changes
are added whole (one dict update, no per-key bookkeeping) to a young generation; when it holds half the tier's
entries it becomes the old generation and the previous old one is dropped, so the tier keeps between half and all of
its entries, the most recently written. A key dropped from it is read below as before (from a commit buffer not yet
applied, or RocksDB, which by then hold a value at least as new): the tier only ever answers with a key's newest
value. A key space (the first two bytes of a key) that a batch deletes by range (timers, a window's keys) is never
kept: its entries are dropped once and later writes to it skip the tier, so a range delete needs no pass over it.
"""

from __future__ import annotations

from typing import Sequence

from common.cache_contract import MISSING

SPACE = 2  # bytes of a key that name its key space (misa.state.keys: 0xFE and a letter, or a time's first bytes);
# a shorter key's space is the key padded with zero bytes


class RecentWrites:
    """The newest values of up to ``max_entries`` recently written keys (0: none kept)."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._young: dict[bytes, bytes | None] = {}
        self._old: dict[bytes, bytes | None] = {}
        self._skipped: set[bytes] = set()  # key spaces deleted by range: never kept

    def add(self, changes: dict[bytes, bytes | None], range_deletes: Sequence[tuple[bytes, bytes]]) -> None:
        """A frozen version's changes (None: deleted), after its range deletes."""
        if not self.max_entries:
            return
        for begin, end in range_deletes:
            self._skip(begin, end)
        if self._skipped:
            skipped = self._skipped
            changes = {k: v for k, v in changes.items() if k[:SPACE].ljust(SPACE, b"\x00") not in skipped}
        self._young.update(changes)
        if 2 * len(self._young) >= self.max_entries:
            self._old, self._young = self._young, {}

    def resolve(self, keys: Sequence[bytes], positions: list[int], out: list[object]) -> list[int]:
        """Fill ``out`` at those of ``positions`` whose key the tier holds; the positions it does not, in order."""
        young, old = self._young, self._old
        if not young and not old:
            return positions
        rest: list[int] = []
        for i in positions:
            value = young.get(keys[i], MISSING)
            if value is MISSING:
                value = old.get(keys[i], MISSING)
                if value is MISSING:
                    rest.append(i)
                    continue
            out[i] = value
        return rest

    def clear(self) -> None:
        """Forget every entry (the state was reloaded)."""
        self._young, self._old = {}, {}

    def __len__(self) -> int:
        """Entries held (a key in both generations counts twice)."""
        return len(self._young) + len(self._old)

    def _skip(self, begin: bytes, end: bytes) -> None:
        """Stop keeping the key spaces [begin, end) reaches into, dropping their entries."""
        first = int.from_bytes(begin[:SPACE].ljust(SPACE, b"\x00"), "big")
        last = int.from_bytes(end[:SPACE].ljust(SPACE, b"\x00"), "big")  # at most one space more than reached
        new = {space.to_bytes(SPACE, "big") for space in range(first, last + 1)} - self._skipped
        if not new:
            return
        self._skipped |= new
        self._young = {k: v for k, v in self._young.items() if k[:SPACE].ljust(SPACE, b"\x00") not in new}
        self._old = {k: v for k, v in self._old.items() if k[:SPACE].ljust(SPACE, b"\x00") not in new}
