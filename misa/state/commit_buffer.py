"""One version's changes, frozen at the end of its batch and owned by its commit until RocksDB has them."""

from __future__ import annotations

from dataclasses import dataclass

from prefetch.cache import MISSING


@dataclass(frozen=True)
class CommitBuffer:
    """One version's changes: range deletes [begin, end) first, then puts and deletes (value None)."""

    version: int
    changes: dict[bytes, bytes | None]
    range_deletes: tuple[tuple[bytes, bytes], ...] = ()

    def lookup(self, key: bytes) -> object:
        """The buffered value (None = deleted) or :data:`MISSING` when this buffer says nothing."""
        found = self.changes.get(key, MISSING)
        if found is MISSING and any(begin <= key < end for begin, end in self.range_deletes):
            return None
        return found

    def __len__(self) -> int:
        return len(self.changes) + len(self.range_deletes)
