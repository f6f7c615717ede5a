"""The batch's dirty entries, the immutable commit buffers they become, and reads over both.

A batch writes into a :class:`WriteBuffer` (the interface the Timestamp-Aware Cache will
implement). When the batch ends the buffer is frozen into a :class:`CommitBuffer` owned by the
commit of that version; until the commit has applied it to RocksDB, reads consult it before
RocksDB, so batch v+1 always sees version v and never waits for its commit.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Sequence

from .state_store import StateStore

_MISSING = object()


@dataclass(frozen=True)
class CommitBuffer:
    """One version's changes: puts and deletes (value None), then range deletes [begin, end)."""

    version: int
    changes: dict[bytes, bytes | None]
    range_deletes: tuple[tuple[bytes, bytes], ...] = ()

    def lookup(self, key: bytes) -> object:
        """The buffered value (None = deleted) or ``_MISSING`` when this buffer says nothing."""
        if any(begin <= key < end for begin, end in self.range_deletes):
            return None
        return self.changes.get(key, _MISSING)

    def __len__(self) -> int:
        return len(self.changes) + len(self.range_deletes)


@dataclass
class WriteBuffer:
    """Dirty entries of the running batch: one write per key per batch."""

    changes: dict[bytes, bytes | None] = field(default_factory=dict)
    range_deletes: list[tuple[bytes, bytes]] = field(default_factory=list)

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        self.changes.update(zip(keys, values))

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete [begin, end): buffered puts in the range are dropped, the rest is recorded."""
        for key in [k for k in self.changes if begin <= k < end]:
            del self.changes[key]
        self.range_deletes.append((begin, end))

    def view(self) -> CommitBuffer:
        """A read-only look at the current entries (not a copy: the batch's own thread reads it)."""
        return CommitBuffer(-1, self.changes, tuple(self.range_deletes))

    def freeze(self, version: int) -> CommitBuffer:
        buffer = CommitBuffer(version, self.changes, tuple(self.range_deletes))
        self.changes, self.range_deletes = {}, []
        return buffer


class StateView:
    """Reads of the running batch: its own writes, then pending commit buffers, then RocksDB."""

    def __init__(self, store: StateStore):
        self.store = store
        self.writes = WriteBuffer()
        self._pending: list[CommitBuffer] = []
        self._lock = threading.Lock()

    # -- commit buffers, registered by the controller until they are in RocksDB
    def add_pending(self, buffer: CommitBuffer) -> None:
        with self._lock:
            self._pending.append(buffer)

    def drop_pending(self, version: int) -> None:
        with self._lock:
            self._pending = [b for b in self._pending if b.version != version]

    def _layers(self) -> list[CommitBuffer]:
        """Newest first; taken before RocksDB is read, so an apply in between changes nothing."""
        with self._lock:
            return list(reversed(self._pending))

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        layers = [self.writes.view()] + self._layers()
        out: list[object] = [_MISSING] * len(keys)
        for i, key in enumerate(keys):
            for layer in layers:
                found = layer.lookup(key)
                if found is not _MISSING:
                    out[i] = found
                    break
        missing = [i for i, v in enumerate(out) if v is _MISSING]
        if missing:
            for i, value in zip(missing, self.store.get_many([keys[i] for i in missing])):
                out[i] = value
        return out  # type: ignore[return-value]

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        """Write this batch's new values (None deletes the key)."""
        self.writes.put_many(keys, values)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        """Delete every key in [begin, end) as of this batch."""
        self.writes.delete_range(begin, end)

    def scan(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        """Every live (key, value) in [begin, end), in key order, as this batch sees it."""
        layers = self._layers()
        merged: dict[bytes, bytes | None] = dict(self.store.scan(begin, end))
        for layer in reversed(layers + [self.writes.view()]):  # oldest first
            for b, e in layer.range_deletes:
                for key in [k for k in merged if b <= k < e]:
                    merged[key] = None
            merged.update((k, v) for k, v in layer.changes.items() if begin <= k < end)
        return sorted((k, v) for k, v in merged.items() if v is not None)
