"""The commit controller: one code path for the modes sync, async-ckpt and misa (DESIGN section 4).

``nocommit`` is the benchmarks' floor: the apply thread writes each version's buffer to RocksDB and
the version counts as done; nothing is flushed, checkpointed or uploaded, so nothing survives.

A commit of version v has two stages. *apply*: write the commit buffer to RocksDB, flush,
checkpoint locally, local marker (ack 1). *upload*: copy to the DFS, DFS marker (ack 2), GC.
``sync`` runs both inline; ``async-ckpt`` runs apply inline and upload in the upload thread;
``misa`` runs both in background threads, apply of v starting only after ack 2 of v-1.

The controller moves each version through its lifecycle (:mod:`misa.state.version`): ``commit`` hands
it over (pending), apply marks it applied once RocksDB has its buffer (the view then stops reading the
buffer), upload marks it durable with ack 2, and a commit that fails for good marks it failed.

Worker threads pick their next task from a shared table (not a queue), so a thread that dies or
stays silent past ``spark.misa.commit.heartbeatTimeout`` is replaced and its task redone: from the
local checkpoint when ack 1 of that version holds, else from the commit buffer (its write to RocksDB
only when the version is not applied yet). Every file step of
a worker calls its fence, which beats the heartbeat and raises in a thread that was replaced, so
that thread stops before it touches the store again. A version is redone at most
``spark.misa.commit.maxRestarts`` times; after that, at once for an inline stage, and at once for
a DFS error that outlasted its retries, its commit fails: the batch's waiters, ``drain`` and
``close`` raise :class:`CommitFailedError`.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from checkpoint import Fence, no_fence
from checkpoint.exceptions import CorruptCheckpointError, DfsUnavailableError, OwnershipError
from common import failpoints
from common.location import redact
from misa.config_keys import CommitMode
from misa.exceptions import CommitFailedError
from misa.obs.records import CommitRecord, CommitStatus
from misa.runtime.spark_mirror import SparkLogMirror
from misa.state.store import EMPTY_VERSION, StateStore
from misa.state.version import BatchVersion, Phase

log = logging.getLogger(__name__)


class CommitStage(str, Enum):
    """Where a version's commit stands. Apply ends with ack 1 (the local marker), upload with ack 2 (the DFS
    marker; the batch after it may finish)."""

    APPLY = "apply"  # write the commit buffer to RocksDB, flush, checkpoint locally, local marker
    UPLOAD = "upload"  # copy the checkpoint to the DFS, DFS marker, retention
    DONE = "done"  # durable

    def __str__(self) -> str:
        return self.value


APPLY, UPLOAD, DONE = CommitStage.APPLY, CommitStage.UPLOAD, CommitStage.DONE
#: Already retried, or a takeover by another driver: redoing the stage cannot help.
FINAL_ERRORS = (DfsUnavailableError, CorruptCheckpointError, OwnershipError)


class _Superseded(Exception):
    """Raised by the fence of a worker that a heartbeat check replaced; it leaves the task to its successor."""


@dataclass
class _Task:
    batch: BatchVersion
    metadata: dict[str, Any]
    record: CommitRecord
    stage: CommitStage = APPLY
    error: CommitFailedError | None = None
    raised: bool = False  # the error reached a caller (close raises only errors nobody has seen)
    reported: bool = False
    retained: bool = False  # the retention GC after its ack 2 has run (its record is complete)
    handed_over: float = field(default_factory=time.monotonic)

    @property
    def version(self) -> int:
        return self.batch.number


@dataclass
class _Worker:
    stage: CommitStage
    thread: threading.Thread | None = None
    generation: int = 0
    beat: float = field(default_factory=time.monotonic)
    task: _Task | None = None  # what the current thread works on
    error: Exception | None = None  # what the current thread died of, until a heartbeat check handles it


class CommitController:
    """Commits versions of ``store`` in ``mode`` and answers for their acks; a worker thread silent for
    ``heartbeat_timeout_s`` is replaced, and a version is redone at most ``max_restarts`` times
    (``spark.misa.commit.heartbeatTimeout`` and ``spark.misa.commit.maxRestarts``, defaults as there)."""

    def __init__(
        self,
        store: StateStore,
        mode: str,
        spark_log: SparkLogMirror | None = None,
        *,
        heartbeat_timeout_s: float = 300.0,
        max_restarts: int = 3,
        uploads: bool = True,
    ):
        self.store = store
        self.uploads = uploads  # False: a standby's, whose versions stay local (:meth:`_keep_local`)
        self.checkpoints = store.checkpoints
        self.spark_log = spark_log  # Spark's checkpoint, mirrored before each version's DFS marker
        self._mirroring = ThreadPoolExecutor(1, thread_name_prefix="misa-mirror") if spark_log else None
        self.mode = CommitMode(mode)
        self.timeout_s = heartbeat_timeout_s
        self.max_restarts = max_restarts
        self._tasks: dict[int, _Task] = {}
        self._cv = threading.Condition()
        self._closed = False
        self._newest: dict[CommitStage, int | None] = {UPLOAD: None, DONE: None}  # newest version with ack 1, ack 2
        threaded = {
            CommitMode.SYNC: (),
            CommitMode.ASYNC_CKPT: (UPLOAD,),
            CommitMode.MISA: (APPLY, UPLOAD),
            CommitMode.NOCOMMIT: (APPLY,),
        }[self.mode]
        self._workers = {stage: _Worker(stage) for stage in threaded}
        for worker in self._workers.values():
            self._start(worker)

    def renewed(self) -> CommitController:
        """A new controller like this one (store, mode, log mirror, limits) without its tasks: for a restart."""
        return CommitController(
            self.store,
            self.mode,
            self.spark_log,
            heartbeat_timeout_s=self.timeout_s,
            max_restarts=self.max_restarts,
            uploads=self.uploads,
        )

    # ------------------------------------------------------------------ the batch's side
    def commit(self, version: BatchVersion, metadata: dict[str, Any]) -> None:
        """Take over the frozen ``version`` (it is pending from now on); returns as the mode allows. Raises
        :class:`CommitFailedError` when a stage run inline fails."""
        version.hand_over()
        task = _Task(version, dict(metadata), CommitRecord(version.number))
        with self._cv:
            self._tasks[task.version] = task
            self._cv.notify_all()
        for stage in (APPLY,) if self.mode == CommitMode.NOCOMMIT else (APPLY, UPLOAD):
            if stage not in self._workers:
                self._run_inline(task, stage)

    def wait_durable(self, version: int) -> float:
        """Block until ``version`` has ack 2; returns seconds waited. Raises :class:`CommitFailedError`
        when the commit of ``version`` or of an older version (which holds it back) failed."""
        started = time.monotonic()
        while True:
            with self._cv:
                self._raise_failure(lambda task: task.version <= version)
                task = self._tasks.get(version)
                if task is None or task.stage == DONE:
                    return time.monotonic() - started
                self._cv.wait(0.2)
            self._check_workers()

    def drain(self) -> None:
        """Wait until every handed-over version is durable and its retention ran (or raise the first failed
        commit's error)."""
        with self._cv:
            versions = sorted(self._tasks)
        for version in versions:
            self.wait_durable(version)
        with self._cv:
            while not self._closed and any(self._retention_pending(t) for t in self._tasks.values()):
                self._cv.wait(0.2)

    def loaded(self, version: int) -> None:
        """The state was loaded at ``version`` (recovery or a replay, with nothing pending): it has both acks,
        except the empty version and in mode ``nocommit``, where nothing is committed."""
        committed = None if version == EMPTY_VERSION or self.mode == CommitMode.NOCOMMIT else version
        with self._cv:
            self._newest = {UPLOAD: committed, DONE: committed}

    def status(self) -> CommitStatus:
        """Versions handed over and not yet durable, and the newest versions with ack 1 and ack 2."""
        with self._cv:
            pending = tuple(sorted(v for v, t in self._tasks.items() if t.stage != DONE))
            return CommitStatus(pending, self._newest[UPLOAD], self._newest[DONE])

    def _retention_pending(self, task: _Task) -> bool:
        """Whether ``task`` is durable and its retention is still to run (never in nocommit, which has none)."""
        return task.stage == DONE and not task.retained and self.mode != CommitMode.NOCOMMIT and task.error is None

    def finished(self) -> list[CommitRecord]:
        """Records of commits that became durable, with the retention after them, since the last call."""
        with self._cv:
            done = [
                t for t in self._tasks.values() if t.stage == DONE and not t.reported and not self._retention_pending(t)
            ]
            for task in done:
                task.reported = True
            for version in [v for v, t in self._tasks.items() if t.reported]:
                del self._tasks[version]
        return [t.record for t in done]

    def mirror_spark_log(self) -> None:
        """Mirror what Spark has written to its local log since the last step, in the background (nothing without
        a mirror): called when Spark reports a batch, so its commit entry reaches the checkpoint location even
        when no next version's upload follows (an idle query), and a start on a new machine does not replay it.
        Safe at any time: the local log's last commit is at most the durable version + 1. A failed step is
        logged; the next version's upload mirrors the same files again before its marker."""
        if self._mirroring is None or self.spark_log is None or self._closed:
            return
        try:
            step = self._mirroring.submit(self.spark_log.sync, self.checkpoints.check_owner)
        except RuntimeError:  # closed meanwhile
            return
        step.add_done_callback(_log_mirror_failure)

    def close(self) -> None:
        """Stop the worker threads; raises the :class:`CommitFailedError` of a failed commit that no
        caller has seen yet (one a thread died of without a waiter to notice counts too)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for worker in self._workers.values():
            if worker.thread is not None:
                worker.thread.join(timeout=5)
        if self._mirroring is not None:
            self._mirroring.shutdown(wait=True)
        with self._cv:
            for worker in self._workers.values():
                if worker.error is not None:
                    self._retire(worker, can_restart=False)
            self._raise_failure(lambda task: not task.raised)

    def _raise_failure(self, which: Callable[[_Task], bool]) -> None:
        """Raise the error of the oldest failed task that ``which`` selects; the caller holds the lock."""
        for version in sorted(self._tasks):
            task = self._tasks[version]
            if task.error is not None and which(task):
                task.raised = True
                raise task.error

    # ------------------------------------------------------------------ stages
    def _run_inline(self, task: _Task, stage: CommitStage) -> None:
        try:
            (self._run_apply if stage == APPLY else self._run_upload)(task, no_fence)
        except Exception as exc:
            with self._cv:
                error = self._fail(task, stage, exc)
                task.raised = True
            raise error from exc

    def _run_apply(self, task: _Task, fence: Fence) -> None:
        """Write the buffer to RocksDB (not again in a redo after it was applied), then checkpoint locally."""
        record = task.record
        if task.batch.phase is Phase.PENDING:
            started = time.monotonic()
            self.store.apply(task.batch.buffer.changes, task.batch.buffer.range_deletes, fence)
            record.apply_s = time.monotonic() - started
            failpoints.hit("commit.after_apply")
            with self._cv:
                fence()  # under the lock: a replaced worker never marks a version its successor applies again
                task.batch.applied()
        if self.mode == CommitMode.NOCOMMIT:  # the floor: the state is in RocksDB, nothing more
            self._advance(task, APPLY, DONE, fence)
            return
        record.compaction_running = self.store.running_compactions()
        local = self.store.checkpoint(task.version, task.metadata, fence)  # flush, checkpoint, local marker
        record.flush_s, record.checkpoint_s = local.flush_s, local.seconds - local.flush_s
        self._advance(task, APPLY, UPLOAD, fence)

    def _run_upload(self, task: _Task, fence: Fence) -> None:
        """Upload the version and mirror Spark's log at once, both before the DFS marker (ack 2); then retention,
        which the batches do not wait for. Each file step is fenced."""
        if not self.uploads:
            self._keep_local(task, fence)
            return
        record = task.record
        mirrored = self._mirroring.submit(self.spark_log.sync, fence) if self._mirroring and self.spark_log else None
        stats = self.checkpoints.upload(task.version, fence, before_marker=mirrored.result if mirrored else None)
        if mirrored is not None:
            step = mirrored.result()
            record.log_files_mirrored = step.files_copied + step.files_removed
            record.log_requests, record.log_mirror_s = step.requests, step.seconds
        record.upload_s, record.files_uploaded, record.dfs_requests = (
            stats.seconds,
            stats.files_uploaded,
            stats.requests,
        )
        record.bytes_uploaded, record.bytes_reused = stats.bytes_uploaded, stats.bytes_reused
        self._advance(task, UPLOAD, DONE, fence)
        try:
            record.retention_requests = self.checkpoints.gc(task.version, fence).requests
        except (_Superseded, OwnershipError):
            raise
        except Exception as exc:  # noqa: BLE001 - the version is durable; the next one's retention tries again
            log.warning("retention after version %d failed (the next version retries it): %s", task.version, exc)
        with self._cv:
            task.retained = True
            self._cv.notify_all()

    def _keep_local(self, task: _Task, fence: Fence) -> None:
        """A standby's upload stage: nothing goes to the DFS (the partition's host owns it); the version counts as
        done with ack 1, and the local level keeps the newest ``retain`` versions, so a standby that takes over
        still holds every version the DFS may lack (:meth:`~misa.parallel.worker.PartitionWorker.claim`)."""
        self._advance(task, UPLOAD, DONE, fence)
        self.checkpoints.local.gc(self.checkpoints.retain, keep_from=None)
        with self._cv:
            del self._tasks[task.version]  # nobody asks a standby for its records
            self._cv.notify_all()

    def _advance(self, task: _Task, expected: CommitStage, to: CommitStage, fence: Fence) -> None:
        with self._cv:
            fence()  # under the lock: a replaced worker never moves a task its successor redoes
            if task.stage == expected:
                task.stage = to
                elapsed = time.monotonic() - task.handed_over
                if to == UPLOAD:
                    task.record.ack1_s = elapsed
                elif self.mode != CommitMode.NOCOMMIT:
                    task.record.ack2_s = elapsed
                newest = self._newest[to]
                if self.mode != CommitMode.NOCOMMIT:  # there, done means applied: no ack
                    self._newest[to] = task.version if newest is None else max(newest, task.version)
                    if to == DONE:
                        task.batch.durable()
            self._cv.notify_all()

    def _fail(self, task: _Task, stage: CommitStage, cause: BaseException) -> CommitFailedError:
        """Record the error that ends ``task``'s commit, for its waiters; the caller holds the lock."""
        restarts = task.record.restarts
        after = f" after {restarts} restart(s) (spark.misa.commit.maxRestarts)" if restarts else ""
        advice = (
            "This driver stops; do not restart it while the driver that took over runs."
            if isinstance(cause, OwnershipError)
            else "Fix the cause and restart the query: it resumes from the newest durable version."
        )
        task.error = CommitFailedError(
            redact(
                f"the commit of version {task.version} failed in its {stage} stage{after}: "
                f"{type(cause).__name__}: {str(cause).rstrip('.')}. {advice}"
            )
        )
        task.error.__cause__ = cause
        if task.batch.phase is not Phase.DURABLE:  # a takeover in its retention fails the commit, not the version
            task.batch.fail()
        self._cv.notify_all()
        return task.error

    # ------------------------------------------------------------------ worker threads
    def _next_task(self, stage: CommitStage) -> _Task | None:
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
                task = worker.task = self._next_task(worker.stage)
                if task is None:
                    self._cv.wait(0.2)
                    continue
            try:
                run(task, fence)
            except _Superseded:
                log.warning("%s thread of generation %d stopped: it was replaced", worker.stage, generation)
                return
            except Exception as exc:  # noqa: BLE001 -- kept for _retire, which logs it with its traceback
                if isinstance(exc, OwnershipError):  # said at once: a deposed state host has no caller to tell
                    log.error("the %s stage of version %d stopped: %s", worker.stage, task.version, exc)
                with self._cv:
                    if worker.generation == generation:  # a heartbeat check logs it, then redoes or fails the task
                        worker.error = exc
                        self._cv.notify_all()
                        return
                log.warning(
                    "replaced %s thread of generation %d ended with %s: %s",
                    worker.stage,
                    generation,
                    type(exc).__name__,
                    redact(str(exc)),
                )
                return

    def _start(self, worker: _Worker) -> None:
        worker.beat = time.monotonic()
        worker.thread = threading.Thread(
            target=self._loop, args=(worker, worker.generation), name=f"misa-{worker.stage}", daemon=True
        )
        worker.thread.start()

    def _check_workers(self) -> None:
        """Replace each worker thread that died or stayed silent past the heartbeat timeout."""
        with self._cv:
            if self._closed:
                return
            for worker in self._workers.values():
                alive = worker.thread is not None and worker.thread.is_alive()
                if worker.error is None and alive and time.monotonic() - worker.beat <= self.timeout_s:
                    continue
                self._retire(worker, can_restart=True)
                self._start(worker)

    def _retire(self, worker: _Worker, can_restart: bool) -> None:
        """Stop ``worker``'s thread at its next fence, then redo or fail its task and log why, once
        (with the traceback of what the thread died of); the caller holds the lock."""
        task, died = worker.task, worker.error
        silent = time.monotonic() - worker.beat
        if died is not None:
            cause: BaseException = died
        elif worker.thread is not None and worker.thread.is_alive():
            cause = TimeoutError(
                f"the {worker.stage} thread was silent for {silent:.1f}s "
                f"(spark.misa.commit.heartbeatTimeout is {self.timeout_s:g}s)"
            )
        else:
            cause = RuntimeError(f"the {worker.stage} thread ended unexpectedly")
        worker.generation += 1
        worker.task = worker.error = None
        outcome = "it was idle" if task is None else self._redo(task, worker.stage, cause, can_restart)
        log.log(
            logging.ERROR if died else logging.WARNING,
            "%s thread %s: %s: %s; %s",
            worker.stage,
            "died" if died else "replaced",
            type(cause).__name__,
            redact(str(cause)),
            outcome,
            exc_info=died,
        )

    def _redo(self, task: _Task, stage: CommitStage, cause: BaseException, can_restart: bool) -> str:
        """Hand ``task`` to a new thread, or fail it when the cause is final or its restarts are used up."""
        if task.stage != stage:
            return f"version {task.version} had already left its {stage} stage"
        if not can_restart or isinstance(cause, FINAL_ERRORS) or task.record.restarts >= self.max_restarts:
            self._fail(task, stage, cause)
            return f"the commit of version {task.version} fails"
        task.record.restarts += 1
        redo = f"(restart {task.record.restarts} of {self.max_restarts})"
        if stage == APPLY and task.batch.phase is Phase.APPLIED and self.checkpoints.ack1_holds(task.version):
            task.stage = UPLOAD  # ack 1 holds: only the upload is redone
            return f"ack 1 of version {task.version} holds: redoing its upload {redo}"
        return f"redoing the {stage} of version {task.version} {redo}"


def _log_mirror_failure(step: Future) -> None:
    if step.exception() is not None:
        log.warning(
            "Spark's log was not mirrored after a batch (the next upload mirrors it)", exc_info=step.exception()
        )
