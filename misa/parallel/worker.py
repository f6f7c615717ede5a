"""A state worker process: one key partition's state store, view, cache, commit controller and operator copy.

The driver (:class:`misa.parallel.pool.WorkerPool`) sends requests over a pipe and waits for each reply; the
worker answers them in order on its main thread, while its commit controller's threads commit its versions
in the background as in one process. A request's error goes back to the driver as the exception itself.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import threading
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from misa.config import MisaConfig
from misa.operators.base import HintSource, KeyPartitioned, OperatorResult, watermark_moves
from misa.parallel import shared_arrow
from misa.runtime.batch_cache import attach_prefetcher, new_view
from misa.runtime.commit import CommitController
from misa.runtime.hint_target import BatchHintLog, HintCounts, LocalHints, SentHints
from misa.state.store import EMPTY_VERSION, StateStore
from prefetch.hints import HINT_HOT, key_counts
from prefetch.manager import PrefetchStats

log = logging.getLogger(__name__)
CLOSE = "close"
PING = "ping"


class TableTransport(Protocol):
    """How tables reach a partition and leave it: ``take`` gives the table a reference names, ``share`` leaves a
    table for the driver to take and gives its reference (:mod:`misa.parallel.shared_arrow` on the driver's machine,
    :class:`misa.hosts.server.HostTables` on an executor)."""

    def take(self, ref: Any) -> pa.Table: ...

    def share(self, table: pa.Table) -> Any: ...


@dataclass
class PartResult:
    """One partition's part of a batch: its output rows (in shared memory), its counters and reads, and the
    latest event time its watermark has seen (None: no watermark, or no event yet)."""

    output: Any  # the output rows' reference in the worker's TableTransport
    late_rows: int
    state_reads: int
    dropped_rows: int
    closed_windows: int
    read_s: float
    device_read_bytes: int | None
    max_event_us: Any  # the watermark's: an int (one input) or per input (InputsWatermark)


class PartitionWorker:
    """The requests a state worker answers (method names are the request names)."""

    def __init__(
        self,
        config: MisaConfig,
        state_dir: str,
        dfs_url: str,
        operator: bytes,
        tables: TableTransport = shared_arrow,  # type: ignore[assignment]
        standby: bool = False,
    ):
        self.config = config
        self.standby = standby  # commits stay local until :meth:`claim` (a state host, which may be a standby)
        self._following = False  # a standby that took the driver's operator (:meth:`follow`)
        self.tables = tables
        self.store = StateStore(config, state_dir, dfs_url)
        self.checkpoints = self.store.checkpoints
        self.operator: KeyPartitioned | Any = pickle.loads(operator)
        self.view = new_view(self.store, config, self.operator)
        self.controller = self._controller()
        self.hints: LocalHints | None = None  # with prefetching: this partition's prefetch manager
        self._hinted = BatchHintLog()  # what the running batch's hints named so far
        if config.prefetching != "false" and isinstance(self.operator, HintSource):
            manager = attach_prefetcher(
                self.view,
                config.prefetch_threads,
                config.prefetch_chunk_keys,
                config.cache_max_bytes,
                active=config.prefetching == "true",
            )
            self.hints = LocalHints(self.operator, manager, self.view)

    def _controller(self) -> CommitController:
        return CommitController(
            self.store,
            self.config.commit_mode,
            heartbeat_timeout_s=self.config.commit_heartbeat_timeout_s,
            max_restarts=self.config.commit_max_restarts,
            uploads=not self.standby,
        )

    # ------------------------------------------------------------------ at start
    def claim(self, query_id: str, operator: bytes, signature: dict[str, Any]) -> None:
        """Take the driver's operator as resolved at start and claim this partition's state for ``query_id``; a
        standby that followed the partition keeps its operator (it holds what the standby applied). A state host
        (every one starts as a standby) then commits to the DFS too (:meth:`_take_over`)."""
        if not self._following:
            self._resolved(operator, signature)
        if self.standby:
            self._take_over(query_id)
        else:
            self.store.claim(query_id)

    def follow(self, query_id: str, operator: bytes, signature: dict[str, Any]) -> None:
        """Take the driver's operator as resolved at start without claiming the state (a standby: its partition's
        host owns the DFS location); its versions record the owner they follow."""
        self._resolved(operator, signature)
        self.store.follow(query_id)
        self._following = True

    def _resolved(self, operator: bytes, signature: dict[str, Any]) -> None:
        self.operator = pickle.loads(operator)
        if self.hints is not None:
            self.hints.operator = self.operator
        self.store.operator = signature

    def _take_over(self, query_id: str) -> None:
        """A standby becomes its partition's host: its local commits end, the claim fences the host it replaces,
        then its versions the DFS lacks are uploaded, and its commits go to the DFS from then on."""
        self.controller.drain()
        self.store.claim(query_id)
        self.standby = False
        durable = self.checkpoints.newest_durable()
        for version in self.checkpoints.locally_committed_after(EMPTY_VERSION if durable is None else durable):
            self.checkpoints.upload_and_retain(version)
        self.renew()
        self.controller.loaded(self.store.version)

    def load(self, version: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Load ``version``: its operator metadata and the signature recorded with it."""
        self.store.load(version)
        return self.store.metadata, self.store.loaded_operator

    def adopt(self, version: int) -> None:
        """Continue from the loaded version (its compatibility checked by the driver): restore the operator, drop
        the cache, tell the controller."""
        self.operator.restore(self.store.metadata)
        self.view.reset()
        self.controller.loaded(version)

    def versions_after(self, version: int) -> list[int]:
        """Versions newer than ``version`` this partition holds, durable or locally committed."""
        retained = [v for v in self.checkpoints.retained_versions() if v > version]
        return sorted({*retained, *self.checkpoints.locally_committed_after(version)})

    def upload_local(self, version: int) -> None:
        """Upload ``version`` if it is only locally committed here."""
        durable = self.checkpoints.newest_durable()
        if version in self.checkpoints.locally_committed_after(EMPTY_VERSION if durable is None else durable):
            self.checkpoints.upload_and_retain(version)

    def renew(self) -> None:
        """Drop the previous run's commits (a restart of the query): a new controller, nothing pending."""
        self.controller.close()
        self.controller = self._controller()

    # ------------------------------------------------------------------ a batch
    def apply(self, deltas: Any) -> PartResult:
        """Merge this partition's deltas (their reference)."""
        self.view.take_reads()
        return self._part(self.operator.apply(self.tables.take(deltas), self.view))

    def observe(self, maxima: list[Any]) -> None:
        """Every partition applied the batch: the watermark observes the whole batch's latest event times (each
        partition's ``max_event_us``)."""
        watermark = self.operator.event_watermark()
        if watermark is not None:
            watermark.merge(maxima)

    def follow_watermark(self, spark_us: int) -> None:
        """The coming batch's watermark is Spark's (:meth:`~misa.operators.watermark.FollowsSpark.follow`)."""
        watermark = self.operator.event_watermark()
        if watermark is not None:
            watermark.follow(spark_us)

    def watermark_moves(self) -> bool:
        """Whether this partition's watermark moves at the next batch."""
        return watermark_moves(self.operator)

    def no_data_batch(self) -> PartResult:
        """The batch without data Spark would run after this one."""
        self.view.take_reads()
        return self._part(self.operator.no_data_batch(self.view))

    def _part(self, result: OperatorResult) -> PartResult:
        reads = self.view.take_reads()
        watermark = self.operator.event_watermark()
        return PartResult(
            self.tables.share(result.output),
            result.late_rows,
            result.state_reads,
            result.dropped_rows,
            result.closed_windows,
            reads.seconds,
            reads.device_bytes,
            None if watermark is None else watermark.max_event_us,
        )

    def hint(self, rows: Any, latest_event_us: int | None) -> HintCounts:
        """Prefetch the state keys this partition's hint rows (their reference) name, then those its timers will
        read."""
        table = self.tables.take(rows)
        if self.hints is None:
            return HintCounts()
        return self.hints.hint_rows(table, latest_event_us, self._hinted)

    def hint_sent(self, rows: Any, latest_event_us: int | None) -> SentHints:
        """Prefetch the state keys that the hint rows a hint job's tasks sent here (their reference) name but the hot
        ones, then those the timers read at the batch's latest event time ``latest_event_us``; with the rows'
        counts for the driver's sketch."""
        table = self.tables.take(rows)
        hot = table[HINT_HOT]
        counts = HintCounts()
        if self.hints is not None:
            counts = self.hints.hint_rows(table.filter(pc.invert(hot)), latest_event_us, self._hinted)
        return SentHints(table.num_rows, int(pc.sum(hot).as_py() or 0), counts, *key_counts(table))

    def prefetch_stats(self) -> PrefetchStats:
        """The batch's prefetch counters (a new batch's hints start)."""
        self._hinted = BatchHintLog()
        return PrefetchStats() if self.hints is None else self.hints.take_stats()

    def set_prefetching(self, on: bool) -> None:
        """Read through the prefetcher (or not) from the next batch on (``spark.misa.prefetch.enabled=auto``)."""
        self.view.set_prefetching(on)

    def commit(self, version: int) -> None:
        """Hand version ``version`` (the batch just applied) to this partition's commit controller."""
        self.controller.commit(self.view.freeze(version), self.operator.metadata())

    def call(self, target: str, method: str, *args: Any) -> Any:
        """Any other request: ``method`` of the store, its checkpoints, the view or the controller."""
        owner = {"store": self.store, "checkpoints": self.checkpoints, "view": self.view, "controller": self.controller}
        return getattr(owner[target], method)(*args)

    def close(self) -> None:
        """Stop the commit threads and release the state (raises a commit failure nobody has seen)."""
        try:
            self.controller.close()
        finally:
            self.view.close()
            self.store.close()


def serve(
    conn: Connection,
    liveness: Connection,
    index: int,
    config: MisaConfig,
    state_dir: str,
    dfs_url: str,
    operator: bytes,
) -> None:
    """The worker process's main: answer requests with the pickled ``operator`` until ``close`` (or until the
    driver's end of the pipe closes), and the driver's pings on ``liveness`` on a thread of their own."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s %(levelname)s [state worker {index}] %(message)s"
    )
    threading.Thread(target=_answer_pings, args=(liveness,), name="misa-liveness", daemon=True).start()
    try:
        worker = PartitionWorker(config, state_dir, dfs_url, operator)
    except Exception as exc:  # noqa: BLE001 - goes to the driver, which raises it
        conn.send(("error", portable(exc)))
        return
    conn.send(("ok", os.getpid()))
    while True:
        try:
            name, args = conn.recv()
        except EOFError:  # the driver is gone
            worker.close()
            return
        try:
            reply = ("ok", getattr(worker, name)(*args))
        except Exception as exc:  # noqa: BLE001 - goes to the driver, which raises it
            log.debug("request %s failed", name, exc_info=True)
            reply = ("error", portable(exc))
        conn.send(reply)
        if name == CLOSE:
            return


def _answer_pings(liveness: Connection) -> None:
    """Answer every ping until the driver's end closes."""
    while True:
        try:
            liveness.recv()
            liveness.send(PING)
        except (EOFError, OSError):
            return


def portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError with its type, text and traceback."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        text = "".join(traceback.format_exception(exc))
        return RuntimeError(f"{type(exc).__name__}: {exc}\n{text}")
