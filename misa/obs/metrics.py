"""One JSON record per batch (DESIGN section 8), joined with Spark's own progress of that batch."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from pyspark.sql.streaming import StreamingQueryListener

from misa.obs.progress_listener import JsonProgressListener
from misa.obs.records import BatchRecord, BatchReport, CommitRecord

log = logging.getLogger(__name__)
RECENT = 100  # batches whose reports stay at hand: Spark keeps as many recent progress updates by default
#: Called with the runtime's report of a batch and Spark's ``StreamingQueryProgress`` of it.
BatchListener = Callable[[BatchReport, Any], None]


class BatchMetrics:
    """Collects the runtime's phases per batch and writes a record when Spark reports the batch; keeps the
    latest report, calls the listeners and feeds the Prometheus endpoint (``prometheus_port``, 0: none)."""

    def __init__(
        self,
        path: str | Path | None,
        mode: str,
        echo: Callable[[dict], None] | None = None,
        prometheus_port: int = 0,
    ):
        self.path = Path(path) if path else None
        self.mode = mode
        self.echo = echo
        self.last: BatchReport | None = None
        self.prometheus_port = prometheus_port
        if prometheus_port:
            from misa.obs.prometheus import client

            client(prometheus_port)  # a missing extra fails now, before anything starts
        self._exporter: Any = None
        self._listeners: list[BatchListener] = []
        self._reports: dict[int, BatchReport] = {}
        self.recent: dict[int, BatchReport] = {}  # the newest RECENT reports by batch id, for the query's progress
        self._pending: dict[int, dict[str, Any]] = {}
        self.run_started: float | None = None  # set by listener(): when the current run's query started
        self.query_id: str | None = None  # the query whose progress this object takes (follow())
        self._unmatched: list[Any] = []  # progress that came before the query's id was known
        self._lock = threading.Lock()
        self._reported = threading.Condition(self._lock)
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def add(self, batch_id: int, batch: BatchRecord | None = None, commits: Sequence[CommitRecord] = ()) -> None:
        """Record the runtime's side of a batch (None: plain Spark has none) and the commits it saw finish."""
        record = batch.as_dict() if batch is not None else {}
        if commits:
            record["commit"] = dataclasses.asdict(commits[-1])
            record["commits_finished"] = [c.version for c in commits]
        with self._lock:
            self._pending.setdefault(batch_id, {}).update(record)

    def report(self, report: BatchReport) -> None:
        """The runtime's report of a batch: kept as the latest, exported, and joined with Spark's progress."""
        self.last = report
        self.recent[report.batch_id] = report
        while len(self.recent) > RECENT:
            del self.recent[next(iter(self.recent))]
        if self._exporter is not None:
            self._exporter.observe_batch(report)
        with self._lock:
            self._reports[report.batch_id] = report
        self.add(report.batch_id, report.record, report.commits)
        with self._lock:  # the commit lag: versions not yet durable when the batch ended
            self._pending.setdefault(report.batch_id, {})["commit_status"] = dataclasses.asdict(report.commit_status)

    def add_listener(self, listener: BatchListener) -> None:
        """Call ``listener(report, progress)`` when Spark reports a batch the runtime reported."""
        self._listeners.append(listener)

    def serve(self, query: str) -> None:
        """Export this query's batches on the Prometheus endpoint, when a port is set (once per object)."""
        if self.prometheus_port and self._exporter is None:
            from misa.obs.prometheus import PrometheusExporter

            self._exporter = PrometheusExporter(self.prometheus_port, query)

    def close(self) -> None:
        """Stop feeding the Prometheus endpoint (it stops when no other job uses its port)."""
        if self._exporter is not None:
            self._exporter.close()
            self._exporter = None

    def wait_reported(self, timeout_s: float = 10.0) -> None:
        """Wait until Spark has reported every batch this object saw (call before removing the listener)."""
        with self._reported:
            self._reported.wait_for(lambda: not self._pending, timeout_s)

    def follow(self, query_id: str) -> None:
        """Take only the progress of query ``query_id`` (Spark's query id, kept across restarts): several queries of
        one session each report to every listener. Progress that came before is taken now if it is this query's."""
        with self._lock:
            self.query_id, early, self._unmatched = str(query_id), self._unmatched, []
        for progress in early:
            self.on_progress(progress)

    def on_progress(self, progress: Any) -> None:
        """Spark's side: input rows, the batch's wall time (``triggerExecution``) and, in native modes, Spark's
        state store: its rows (``spark_state_rows``, when Spark counts them), its memory
        (``spark_state_memory_bytes``, Spark's ``memoryUsedBytes``) and its RocksDB SST files
        (``spark_state_sst_bytes``, ``rocksdbSstFileSize``).

        Spark's ``numInputRows`` counts the input once per Spark job that reads the batch (the hint
        job and the quarantine add jobs); when the runtime counted the batch's records itself, that
        count is ``input_rows`` and Spark's is kept as ``spark_input_rows``.
        """
        with self._lock:
            if self.query_id is None:
                self._unmatched.append(progress)
                return
        if str(progress.id) != self.query_id:
            return  # another query of the session
        durations = progress.durationMs or {}
        if "addBatch" not in durations:
            return  # an idle trigger, not a batch
        with self._lock:
            record = dict(self._pending.get(progress.batchId, {}))
            report = self._reports.get(progress.batchId)
        try:
            self._write(record, progress, durations)
            if report is not None:
                self._tell(report, progress, record["latency_s"])
        finally:  # only now is the batch reported (close waits for it)
            with self._lock:
                self._pending.pop(progress.batchId, None)
                self._reports.pop(progress.batchId, None)
                self._reported.notify_all()

    def _write(self, record: dict[str, Any], progress: Any, durations: dict[str, int]) -> None:
        """Join Spark's side into the runtime's record; write and echo it."""
        record.update(
            {
                "batch_id": progress.batchId,
                "started": datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp(),
                "mode": self.mode,
                "run_started": self.run_started,
                "spark_input_rows": progress.numInputRows,
                "latency_s": durations.get("triggerExecution", 0) / 1000.0,
                "add_batch_s": durations.get("addBatch", 0) / 1000.0,
            }
        )
        record.setdefault("input_rows", progress.numInputRows)  # the runtime's own count when it has one
        record.update(spark_state(getattr(progress, "stateOperators", None) or []))
        if self.path:
            with self._lock, self.path.open("a") as out:
                out.write(json.dumps(record, default=float) + "\n")
        if self.echo:
            self.echo(record)

    def _tell(self, report: BatchReport, progress: Any, latency_s: float) -> None:
        """Hand a reported batch to the endpoint and the listeners; a listener's error is logged, not raised."""
        exporter = self._exporter
        if exporter is not None:
            exporter.observe_latency(latency_s)
        for listener in list(self._listeners):
            try:
                listener(report, progress)
            except Exception:  # noqa: BLE001 -- Spark's listener bus goes on too
                log.exception("batch listener %r failed on batch %d", listener, report.batch_id)

    def listener(self) -> StreamingQueryListener:
        """A listener to add with ``spark.streams.addListener`` when a query starts: it begins a new run, whose
        records carry its start time as ``run_started`` (so that ``misa report`` marks restarts)."""
        self.run_started = time.time()
        with self._lock:
            self.query_id, self._unmatched = None, []
        metrics = self

        class _Listener(JsonProgressListener):
            def onQueryProgress(self, event: Any) -> None:
                metrics.on_progress(event.progress)

        return _Listener()


def spark_state(operators: Sequence[Any]) -> dict[str, int]:
    """Spark's own state store in a batch's progress (its ``stateOperators``), summed over the operators:
    rows when Spark counts them (not with ``trackTotalNumberOfRows`` off), memory, and RocksDB's SST files."""
    out: dict[str, int] = {}
    rows = sum(op.numRowsTotal for op in operators)
    if rows > 0:
        out["spark_state_rows"] = rows
    if operators:
        out["spark_state_memory_bytes"] = sum(op.memoryUsedBytes for op in operators)
        sst = [op.customMetrics.get("rocksdbSstFileSize") for op in operators]
        if any(v is not None for v in sst):
            out["spark_state_sst_bytes"] = sum(v or 0 for v in sst)
    return out


def summary_line(record: dict) -> str:
    """The per-batch line printed while a job runs."""
    phases = record.get("phases", {})
    commit = record.get("commit") or {}
    parts = [
        f"batch {record['batch_id']:>4}",
        f"rows {record.get('input_rows', 0):>7}",
        f"latency {record['latency_s'] * 1000:>6.0f} ms",
    ]
    if phases:
        parts += [
            f"compute {phases.get('compute_s', 0) * 1000:>5.0f} ms",
            f"state read {phases.get('state_read_s', 0) * 1000:>5.0f} ms",
            f"apply {phases.get('state_apply_s', 0) * 1000:>5.0f} ms",
            f"ack wait {phases.get('ack_wait_s', 0) * 1000:>4.0f} ms",
        ]
    if "state_keys" in record:
        parts.append(f"state keys ~{record['state_keys']} (RocksDB estimate)")
    if commit:
        parts.append(f"committed v{commit['version']} ({commit['bytes_uploaded'] / 1024:.0f} KiB up)")
    if record.get("late_rows"):
        parts.append(f"late {record['late_rows']}")
    if record.get("dropped_rows"):
        parts.append(f"dropped {record['dropped_rows']}")
    return " | ".join(parts)
