"""One owner per checkpoint: an exclusive lock on the state dir, and a fenced owner record on the DFS.

Two drivers must never write the same state. Two mechanisms make sure of it:

* :class:`StateDirLock`: an exclusive ``flock`` on ``STATE_DIR/.misa.lock``, taken before anything in
  the state dir is changed and held until the store is closed. A second driver on the same host
  (or a second store in the same process) is refused at once; the kernel drops the lock when the
  holder dies, so a crash never leaves a stale lock.
* :class:`OwnerRecord`: ``DFS/_owner.json`` names the owning query (Spark's query id, from the
  checkpoint's ``metadata``) and a driver *epoch*. Each start claims the location: it refuses a
  record of another query, writes its own with the epoch incremented, and reads it back. A
  driver whose epoch was superseded (a standby took over) fails its :meth:`OwnerRecord.check`,
  which the store calls before every marker, every upload and every GC, so it stops before it
  writes anything that counts.

Guarantees by backend: every backend gets check-then-write with a re-read (a claim that loses a
simultaneous race is noticed at its read-back or at its first check). Closing the remaining window
(a superseded driver that passed its check a moment before the new one claimed may still write
that one marker) needs conditional writes; fsspec exposes none portably, so the runtime relies on
the continuity check instead: the new driver's first batch must follow its restored version, and a
marker the old driver slipped in makes that batch fail with the recovery message, never run on
wrong state.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from .exceptions import OwnershipError

OWNER_FILE = "_owner.json"
LOCK_FILE = ".misa.lock"


@dataclass(frozen=True)
class Owner:
    """Who may write a checkpoint location: a query (Spark's query id) and one driver start of it."""

    query_id: str
    epoch: int
    driver: str  # host:pid of the driver that claimed it, for messages
    claimed: float

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner:
        raw = json.loads(data)
        return cls(str(raw["query_id"]), int(raw["epoch"]), str(raw["driver"]), float(raw["claimed"]))


def this_driver() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


class StateDirLock:
    """An exclusive, non-blocking ``flock`` on a state dir, held until :meth:`release`."""

    def __init__(self, root: Path):
        self.root = root
        self._file: IO[str] | None = None

    def acquire(self) -> StateDirLock:
        """Take the lock, or raise :class:`OwnershipError` naming the holder."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / LOCK_FILE
        handle = open(path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            holder = handle.read().strip() or "another driver"
            handle.close()
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise OwnershipError(
                f"the state dir {self.root} is in use by {holder} (it holds {path}). Two drivers must not share "
                f"a state dir: stop the other driver first, or give this one its own spark.misa.state.dir."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(this_driver())
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class OwnerRecord:
    """The owner record of a DFS location (any fsspec file system)."""

    def __init__(self, fs: Any, root: str, shown: str, what: str = "DFS location"):
        self.fs = fs
        self.what = what
        self.path = f"{root.rstrip('/')}/{OWNER_FILE}"
        self.shown = f"{shown.rstrip('/')}/{OWNER_FILE}"
        self.claimed: Owner | None = None

    def read(self) -> Owner | None:
        """The current owner, or None when the location has never been claimed."""
        try:
            data = self.fs.cat_file(self.path)
        except FileNotFoundError:
            return None
        try:
            return Owner.from_json(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise OwnershipError(
                f"the owner record {self.shown} is damaged ({exc}); if no other query uses this location, delete "
                f"it and start again"
            ) from exc

    def refuse_foreign(self, query_id: str) -> Owner | None:
        """The current owner; :class:`OwnershipError` when it is another query."""
        current = self.read()
        if current is not None and current.query_id != query_id:
            raise OwnershipError(self._foreign(current, query_id))
        return current

    def claim(self, query_id: str) -> Owner:
        """Make this driver the owner for ``query_id`` with the next epoch; refuse another query's location."""
        current = self.refuse_foreign(query_id)
        owner = Owner(query_id, (current.epoch if current else 0) + 1, this_driver(), time.time())
        parent = self.path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        self.fs.pipe_file(self.path, owner.to_json())
        back = self.read()
        if back != owner:
            raise OwnershipError(
                f"{self.shown} was claimed at the same time by {back.driver if back else 'another driver'} "
                f"(query {back.query_id if back else '?'}): two drivers are starting on one checkpoint. Stop one."
            )
        self.claimed = owner
        return owner

    def check(self) -> None:
        """Raise :class:`OwnershipError` unless this driver's claim still holds (a no-op before any claim)."""
        if self.claimed is None:
            return
        current = self.read()
        if current == self.claimed:
            return
        if current is None:
            raise OwnershipError(f"{self.shown} was deleted while this driver owned it; stopping before any write")
        if current.query_id != self.claimed.query_id:
            raise OwnershipError(self._foreign(current, self.claimed.query_id))
        raise OwnershipError(
            f"this driver (epoch {self.claimed.epoch}) was superseded by {current.driver} (epoch {current.epoch}, "
            f"claimed {time.ctime(current.claimed)}): another driver took over this checkpoint, so this one stops "
            f"before it writes a marker, uploads or deletes anything."
        )

    def _foreign(self, current: Owner, query_id: str) -> str:
        setting = "spark.misa.checkpoint.dfsUrl" if self.what == "DFS location" else "spark.misa.state.dir"
        return (
            f"the {self.what} of {self.shown} belongs to query {current.query_id} (last started by "
            f"{current.driver}), not to this query ({query_id}). Two queries must not share {setting}: give this "
            f"query its own (or its own checkpoint location, under which the defaults lie); to start this query "
            f"over, delete the old state first."
        )
