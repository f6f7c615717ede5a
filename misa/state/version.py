"""The lifecycle of one batch's version of the state, owned by :class:`BatchVersion`.

::

    OPEN --freeze--> FROZEN --hand_over--> PENDING --applied--> APPLIED --durable--> DURABLE
                                              |                    |
                                              +-------fail---------+--> FAILED

* OPEN: the batch writes its changes into the view's state cache. The version has no number yet.
* FROZEN: the batch ended; :meth:`misa.state.view.StateView.freeze` drained its changes into an
  immutable :class:`~misa.state.commit_buffer.CommitBuffer`, named the version after Spark's batch id
  and registered it with the view, whose reads consult the buffer below the cache from now on.
* PENDING: handed to the commit (:meth:`misa.runtime.commit.CommitController.commit`), which owns it.
* APPLIED: the buffer is in RocksDB; the view stops reading the buffer (it asks :attr:`buffered`).
  Mode ``nocommit`` ends here: nothing is checkpointed.
* DURABLE: ack 2, the DFS marker of the version, is written. Terminal.
* FAILED: the commit failed for good (the controller holds the error). Terminal; the buffer stays
  visible to reads when the failure came before RocksDB had it.

Callers must move a version only forward, one step at a time, in the order above; any other move
raises :class:`LifecycleError` and changes nothing (freezing twice, handing over twice, applying a
version not handed over or applying it twice, durable before applied, failing a finished version).
Implementations must not mutate a buffer after freeze, nor write RocksDB for a version before it
is PENDING.

Threads: the batch thread opens, freezes and hands over (the view and the controller's ``commit``);
the apply stage marks applied (the apply thread in mode ``misa`` and ``nocommit``, else the batch
thread); the upload stage marks durable (the upload thread in modes ``misa`` and ``async-ckpt``,
else the batch thread); the controller marks failed under its lock. Transitions are atomic;
:attr:`phase` and :attr:`buffered` may be read from any thread without a lock.
"""

from __future__ import annotations

import threading
from enum import Enum

from misa.exceptions import LifecycleError
from misa.state.commit_buffer import CommitBuffer


class Phase(str, Enum):
    """Where a version stands in its lifecycle."""

    OPEN = "open"
    FROZEN = "frozen"
    PENDING = "pending"
    APPLIED = "applied"
    DURABLE = "durable"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class BatchVersion:
    """One batch's version, from its open write phase to durable (or failed); see the module's contract."""

    def __init__(self) -> None:
        self.phase = Phase.OPEN
        self._number: int | None = None
        self._buffer: CommitBuffer | None = None
        self._in_rocksdb = False
        self._lock = threading.Lock()

    @property
    def number(self) -> int:
        """The version's number, Spark's batch id (named at freeze)."""
        if self._number is None:
            raise LifecycleError("an open version has no number yet: freeze names it")
        return self._number

    @property
    def buffer(self) -> CommitBuffer:
        """The version's changes (frozen at freeze)."""
        if self._buffer is None:
            raise LifecycleError("an open version has no commit buffer yet: freeze makes it")
        return self._buffer

    @property
    def buffered(self) -> bool:
        """Whether reads must consult the buffer: frozen, and RocksDB does not have it yet."""
        return self._buffer is not None and not self._in_rocksdb

    def freeze(self, buffer: CommitBuffer) -> None:
        """OPEN -> FROZEN: the batch's changes, as version ``buffer.version``; the batch thread."""
        with self._lock:
            self._require(Phase.OPEN, "freeze")
            self._number, self._buffer, self.phase = buffer.version, buffer, Phase.FROZEN

    def hand_over(self) -> None:
        """FROZEN -> PENDING: the commit owns the version now; the batch thread."""
        self._move(Phase.FROZEN, Phase.PENDING, "hand over")

    def applied(self) -> None:
        """PENDING -> APPLIED: RocksDB has the buffer, reads stop consulting it; the apply stage."""
        with self._lock:
            self._require(Phase.PENDING, "mark applied")
            self._in_rocksdb, self.phase = True, Phase.APPLIED

    def durable(self) -> None:
        """APPLIED -> DURABLE: ack 2 holds; the upload stage."""
        self._move(Phase.APPLIED, Phase.DURABLE, "mark durable")

    def fail(self) -> None:
        """PENDING or APPLIED -> FAILED: the commit failed for good; the controller."""
        with self._lock:
            self._require((Phase.PENDING, Phase.APPLIED), "fail")
            self.phase = Phase.FAILED

    def _move(self, expected: Phase, to: Phase, action: str) -> None:
        with self._lock:
            self._require(expected, action)
            self.phase = to

    def _require(self, expected: Phase | tuple[Phase, ...], action: str) -> None:
        """Raise unless the phase is ``expected``; the caller holds the lock."""
        allowed = expected if isinstance(expected, tuple) else (expected,)
        if self.phase not in allowed:
            name = "an open version" if self._number is None else f"version {self._number}"
            wanted = " or ".join(str(p) for p in allowed)
            raise LifecycleError(f"cannot {action} {name}: it is {self.phase}, not {wanted}")

    def __repr__(self) -> str:
        return f"BatchVersion({self._number}, {self.phase})"
