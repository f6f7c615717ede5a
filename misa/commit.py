"""The commit controller: one code path for the modes sync, async-ckpt and misa (DESIGN section 4).

A commit of version v has two stages. *apply*: write the commit buffer to RocksDB, flush,
checkpoint locally, local marker (ack 1). *upload*: copy to the DFS, DFS marker (ack 2), GC.
``sync`` runs both inline; ``async-ckpt`` runs apply inline and upload in the upload thread;
``misa`` runs both in background threads, apply of v starting only after ack 2 of v-1.

Worker threads pick their next task from a shared table (not a queue), so a thread that dies or
stays silent past ``spark.misa.commit.heartbeatTimeout`` is replaced and its task redone: from the
local checkpoint when ack 1 of that version holds, else from the commit buffer.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from checkpoint import CorruptCheckpointError, DfsUnavailableError, failpoints

from .commit_buffer import CommitBuffer, StateView
from .state_store import StateStore

log = logging.getLogger(__name__)

APPLY, UPLOAD, DONE = "apply", "upload", "done"
FINAL_ERRORS = (DfsUnavailableError, CorruptCheckpointError)


class _Superseded(Exception):
    """Raised in a worker that a heartbeat check replaced; it leaves the task to its successor."""


def _no_fence() -> None:
    return None


@dataclass
class CommitRecord:
    """Timings and sizes of one version's commit, for the metrics."""

    version: int
    apply_s: float = 0.0
    flush_s: float = 0.0
    checkpoint_s: float = 0.0
    upload_s: float = 0.0
    bytes_uploaded: int = 0
    bytes_reused: int = 0
    compaction_running: int = 0
    restarts: int = 0


@dataclass
class _Task:
    buffer: CommitBuffer
    metadata: dict[str, Any]
    record: CommitRecord
    stage: str = APPLY
    error: BaseException | None = None
    reported: bool = False

    @property
    def version(self) -> int:
        return self.buffer.version


@dataclass
class _Worker:
    stage: str
    thread: threading.Thread | None = None
    generation: int = 0
    beat: float = field(default_factory=time.monotonic)


class CommitController:
    """Commits versions of ``store`` in the configured mode and answers for their acks."""

    def __init__(self, store: StateStore, view: StateView, mode: str | None = None):
        self.store = store
        self.view = view
        self.mode = mode or store.config.commit_mode
        self.timeout_s = store.config.commit_heartbeat_timeout_s
        self._tasks: dict[int, _Task] = {}
        self._cv = threading.Condition()
        self._closed = False
        threaded = {"sync": (), "async-ckpt": (UPLOAD,), "misa": (APPLY, UPLOAD)}[self.mode]
        self._workers = {stage: _Worker(stage) for stage in threaded}
        for worker in self._workers.values():
            self._start(worker)

    # ------------------------------------------------------------------ the batch's side
    def commit(self, buffer: CommitBuffer, metadata: dict[str, Any]) -> None:
        """Hand version ``buffer.version`` to the commit; returns as the mode allows."""
        task = _Task(buffer, dict(metadata), CommitRecord(buffer.version))
        self.view.add_pending(buffer)
        with self._cv:
            self._tasks[task.version] = task
            self._cv.notify_all()
        if APPLY not in self._workers:
            self._run_apply(task)
        if UPLOAD not in self._workers:
            self._run_upload(task)
        if task.error is not None:
            raise task.error

    def wait_durable(self, version: int) -> float:
        """Block until ``version`` has ack 2 (or raise its commit's error); returns seconds waited."""
        started = time.monotonic()
        while True:
            with self._cv:
                task = self._tasks.get(version)
                if task is None or task.stage == DONE:
                    return time.monotonic() - started
                if task.error is not None:
                    raise task.error
                self._cv.wait(0.2)
            self._check_workers()

    def drain(self) -> None:
        """Wait until every handed-over version is durable."""
        with self._cv:
            versions = list(self._tasks)
        for version in versions:
            self.wait_durable(version)

    def finished(self) -> list[CommitRecord]:
        """Records of commits that became durable since the last call."""
        with self._cv:
            done = [t for t in self._tasks.values() if t.stage == DONE and not t.reported]
            for task in done:
                task.reported = True
            for version in [v for v, t in self._tasks.items() if t.reported]:
                del self._tasks[version]
        return [t.record for t in done]

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for worker in self._workers.values():
            if worker.thread is not None:
                worker.thread.join(timeout=5)

    # ------------------------------------------------------------------ stages
    def _run_apply(self, task: _Task, fence: Callable[[], None] = _no_fence) -> None:
        record = task.record
        started = time.monotonic()
        self.store.apply(task.buffer.changes, task.buffer.range_deletes)
        record.apply_s = time.monotonic() - started
        failpoints.hit("commit.after_apply")
        fence()
        self.view.drop_pending(task.version)
        record.compaction_running = self.store.running_compactions()
        local = self.store.checkpoint(task.version, task.metadata)  # flush, checkpoint, local marker
        record.flush_s, record.checkpoint_s = local.flush_s, local.seconds - local.flush_s
        self._advance(task, APPLY, UPLOAD)

    def _run_upload(self, task: _Task, fence: Callable[[], None] = _no_fence) -> None:
        fence()
        try:
            stats = self.store.upload(task.version)
        except FINAL_ERRORS as exc:
            with self._cv:
                task.error = exc
                self._cv.notify_all()
            return
        task.record.upload_s = stats.seconds
        task.record.bytes_uploaded, task.record.bytes_reused = stats.bytes_uploaded, stats.bytes_reused
        self._advance(task, UPLOAD, DONE)

    def _advance(self, task: _Task, expected: str, to: str) -> None:
        with self._cv:
            if task.stage == expected:
                task.stage = to
            self._cv.notify_all()

    # ------------------------------------------------------------------ worker threads
    def _next_task(self, stage: str) -> _Task | None:
        """Lowest version waiting in ``stage``; apply of v only once every older version is durable."""
        for version in sorted(self._tasks):
            task = self._tasks[version]
            if task.error is not None:
                return None
            if task.stage == stage:
                return task
            if stage == APPLY and task.stage != DONE:
                return None
        return None

    def _loop(self, worker: _Worker, generation: int) -> None:
        run = self._run_apply if worker.stage == APPLY else self._run_upload

        def fence() -> None:
            if worker.generation != generation:
                raise _Superseded()
            worker.beat = time.monotonic()
        while True:
            with self._cv:
                worker.beat = time.monotonic()
                if self._closed or worker.generation != generation:
                    return
                task = self._next_task(worker.stage)
                if task is None:
                    self._cv.wait(0.2)
                    continue
            try:
                run(task, fence)  # any other exception ends this thread; a waiter's heartbeat check redoes the task
            except _Superseded:
                log.warning("%s thread of generation %d stopped: it was replaced", worker.stage, generation)
                return

    def _start(self, worker: _Worker) -> None:
        worker.beat = time.monotonic()
        worker.thread = threading.Thread(
            target=self._loop, args=(worker, worker.generation), name=f"misa-{worker.stage}", daemon=True
        )
        worker.thread.start()

    def _check_workers(self) -> None:
        now = time.monotonic()
        for worker in self._workers.values():
            alive = worker.thread is not None and worker.thread.is_alive()
            if alive and now - worker.beat <= self.timeout_s:
                continue
            with self._cv:
                worker.generation += 1
                stuck = [t for t in self._tasks.values() if t.stage == worker.stage and t.error is None]
                for task in stuck:
                    task.record.restarts += 1
                    if task.stage == APPLY and not self.store.checkpoints.local.problems(task.version):
                        task.stage = UPLOAD  # ack 1 holds: only the upload is redone
            log.warning("%s thread %s; restarting it (versions %s)", worker.stage,
                        "died" if not alive else f"silent for {now - worker.beat:.0f}s",
                        [t.version for t in stuck])
            self._start(worker)
