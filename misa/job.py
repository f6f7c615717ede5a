"""The job API: a stateful foreachBatch job over a streaming DataFrame.

::

    job = StatefulJob(operator, sink, checkpoint_location="/data/cm2/ckpt",
                      upstream=lambda df: df.where("event_type = 1"), config=MisaConfig.from_spark_conf(conf))
    query = job.start(spark, stream_df, trigger={"processingTime": "3 seconds"})
    query.awaitTermination(); job.close()

``start`` reconciles the state with Spark's checkpoint (recovery) before the query starts; the
runtime supplies the foreachBatch function.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from .commit import CommitController
from .commit_buffer import StateView
from .config import MisaConfig
from .metrics import BatchMetrics, summary_line
from .operators import StatefulOperator
from .recovery import reconcile
from .state_store import StateStore

log = logging.getLogger(__name__)
Sink = Callable[[int, pa.Table], None]


class StatefulJob:
    """Runs ``operator`` over each micro-batch with state in RocksDB and the configured commit mode."""

    def __init__(
        self,
        operator: StatefulOperator,
        sink: Sink,
        checkpoint_location: str,
        *,
        upstream: Callable[[DataFrame], DataFrame] | None = None,
        config: MisaConfig | None = None,
        state_dir: str | None = None,
        dfs_url: str | None = None,
        metrics_path: str | None = None,
        echo: Callable[[str], None] | None = print,
    ):
        self.config = config or MisaConfig()
        self.operator = operator
        self.sink = sink
        self.upstream = upstream
        self.checkpoint_location = checkpoint_location.removeprefix("file://")
        local = Path(self.checkpoint_location)
        self.store = StateStore(
            self.config,
            state_dir or self.config.state_dir or local / "misa-local",
            dfs_url or self.config.dfs_url or f"file://{local.resolve() / 'misa-state'}",
        )
        self.view = StateView(self.store)
        self.controller = CommitController(self.store, self.view)
        self.metrics = BatchMetrics(metrics_path, self.controller.mode,
                                    (lambda r: echo(summary_line(r))) if echo else None)
        self.version = self.store.version
        self._listener: Any = None

    def start(self, spark: SparkSession, stream: DataFrame, trigger: dict[str, Any],
              query_name: str | None = None) -> StreamingQuery:
        """Recover, then start the streaming query with this job as its foreachBatch function."""
        self._load(reconcile(self.store, self.checkpoint_location))
        self._listener = self.metrics.listener()
        spark.streams.addListener(self._listener)
        writer = stream.writeStream.foreachBatch(self.run_batch).option("checkpointLocation", self.checkpoint_location)
        if query_name:
            writer = writer.queryName(query_name)
        return writer.trigger(**trigger).start()

    def _load(self, version: int) -> None:
        restored = self.store.load(version)
        self.operator.restore(restored.metadata if restored else {})
        self.view.writes.freeze(version)  # discard anything a failed attempt left behind
        self.version = version

    def run_batch(self, batch: DataFrame, batch_id: int) -> None:
        """The foreachBatch function: returns only after ack 2 of batch_id - 1."""
        started = time.monotonic()
        if batch_id <= self.version:  # a replay: rebuild from the version before it
            log.warning("batch %d replayed; reloading state version %d", batch_id, batch_id - 1)
            self.controller.drain()
            self._load(batch_id - 1)
        upstream = self.upstream(batch) if self.upstream else batch
        deltas = self.operator.deltas(upstream).toArrow()
        computed = time.monotonic()
        result = self.operator.apply(deltas, self.view)
        applied = time.monotonic()
        self.sink(batch_id, result.output)
        sunk = time.monotonic()
        self.controller.commit(self.view.writes.freeze(batch_id), self.operator.metadata())
        committed = time.monotonic()
        ack_wait = self.controller.wait_durable(batch_id - 1)
        self.version = batch_id
        self.metrics.add(batch_id, {
            "output_rows": result.output.num_rows,
            "late_rows": result.late_rows,
            "state_keys": self.store.approximate_keys(),
            "phases": {
                "compute_s": computed - started,
                "state_apply_s": applied - computed,
                "sink_s": sunk - applied,
                "commit_inline_s": committed - sunk,
                "ack_wait_s": ack_wait,
            },
            "state_reads": result.state_reads,
            "batch_s": time.monotonic() - started,
        }, self.controller.finished())

    def close(self, spark: SparkSession | None = None) -> None:
        """Wait for every commit to be durable, then release the state (and the metrics listener)."""
        try:
            self.controller.drain()
        finally:
            if spark is not None and self._listener is not None:
                self.metrics.wait_reported()
                spark.streams.removeListener(self._listener)
            self.controller.close()
            self.store.close()
