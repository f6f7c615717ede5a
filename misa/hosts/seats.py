"""Which task of the hosts' job serves, once the hosts started: a seat per partition's host and standby, and a slot
kept for the query's tasks.

At the start every task serves. Later a task starts because Spark ran it again (its executor was lost, or the
driver killed it) or because the driver started it again. It serves if its partition awaits a new host, or if the
partition lacks a standby and the cluster keeps a task slot free for the query's tasks besides it. Otherwise it
leaves at once (its task ends, and Spark runs it no more): after an executor loss, the survivors' slots go to the
query's tasks, not to standbys that would load their state meanwhile. A task that left is started again when the
cluster has room for it and the query (:meth:`Seats.to_start_again`), or at once when its partition needs a host.
"""

from __future__ import annotations

import threading
from typing import Callable

Held = Callable[[], tuple[dict[int, int], int]]
"""The standbys each partition holds (those catching up too), and the host tasks serving in all."""


class Seats:
    """The seats of one launch's ``per_partition`` tasks per partition; ``role`` gives a task's partition and
    replica, ``slots`` the cluster's task slots now, ``held`` what the hosts hold (set once they started)."""

    def __init__(self, per_partition: int, role: Callable[[int], tuple[int, int]], slots: Callable[[], int]):
        self.per_partition = per_partition
        self._role = role
        self._slots = slots
        self.held: Held | None = None  # None: the start runs, every task serves
        self._lock = threading.Lock()
        self._awaiting: set[int] = set()  # partitions whose new host is awaited
        self._left: dict[int, list[int]] = {}  # tasks that left, by partition
        self._coming: dict[int, set[int]] = {}  # tasks started again that have not asked yet, by partition

    def serves(self, task: int) -> bool:
        """Whether task ``task``, starting, serves (else it leaves and is remembered to start again)."""
        partition, _ = self._role(task)
        with self._lock:
            self._coming.get(partition, set()).discard(task)  # a task Spark ran again was not coming
            if self.held is None or partition in self._awaiting or self.per_partition == 1:
                return True
            if self._has_room(partition, 1):
                return True
            self._left.setdefault(partition, []).append(task)
            return False

    def _has_room(self, partition: int, tasks: int) -> bool:
        """Whether ``tasks`` more standby tasks of ``partition`` are wanted and fit with a slot left for the query."""
        assert self.held is not None
        standbys, serving = self.held()
        coming = sum(map(len, self._coming.values()))
        wanted = self.per_partition - 1 - standbys.get(partition, 0) - len(self._coming.get(partition, ()))
        return wanted >= tasks and self._slots() - serving - coming - tasks >= 1

    def awaiting(self, partition: int) -> list[int]:
        """``partition`` awaits a new host: its next task serves; the tasks of it that left, to start one again."""
        with self._lock:
            self._awaiting.add(partition)
            return self._take_left(partition, 1)

    def found(self, partition: int) -> None:
        """``partition``'s new host came."""
        with self._lock:
            self._awaiting.discard(partition)

    def to_start_again(self) -> list[int]:
        """The tasks that left to start again now: for each partition lacking standbys, as many as fit."""
        with self._lock:
            if self.held is None:
                return []
            tasks = []
            for partition in sorted(self._left):
                while self._left.get(partition) and self._has_room(partition, 1):
                    tasks += self._take_left(partition, 1)
            return tasks

    def _take_left(self, partition: int, count: int) -> list[int]:
        """Up to ``count`` of ``partition``'s tasks that left, now counted as coming."""
        left = self._left.get(partition, [])
        taken, self._left[partition] = left[:count], left[count:]
        self._coming.setdefault(partition, set()).update(taken)
        return taken
