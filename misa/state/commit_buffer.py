"""One version's changes, frozen at the end of its batch and owned by its commit until RocksDB has them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from common.cache_contract import MISSING


@dataclass(frozen=True)
class CommitBuffer:
    """One version's changes: range deletes [begin, end) first, then puts and deletes (value None)."""

    version: int
    changes: dict[bytes, bytes | None]
    range_deletes: tuple[tuple[bytes, bytes], ...] = ()

    def resolve(self, keys: Sequence[bytes], positions: list[int], out: list[object]) -> list[int]:
        """Fill ``out`` at those of ``positions`` whose key this buffer decides (its value, or None when
        deleted); the positions it says nothing about, in order. One pass, no call per key."""
        changes, ranges = self.changes, self.range_deletes
        rest: list[int] = []
        for i in positions:
            value = changes.get(keys[i], MISSING)
            if value is not MISSING:
                out[i] = value
                continue
            key = keys[i]
            for begin, end in ranges:
                if begin <= key < end:
                    out[i] = None
                    break
            else:
                rest.append(i)
        return rest

    def __len__(self) -> int:
        return len(self.changes) + len(self.range_deletes)
