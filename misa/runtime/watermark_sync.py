"""The operator kept in step with Spark's watermark and trigger, as Spark keeps a stateful node of its own.

When the stream has ``withWatermark``, each batch's operator watermark is the one Spark planned the batch with.
After a data batch whose watermark moved, a batch without data is requested from Spark's trigger when Spark,
running the operator itself, would run one (:mod:`misa.runtime.no_data_batches`); the next batch is then told
apart as one this run asked for.
"""

from __future__ import annotations

import threading
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from misa.operators.base import StatefulOperator, runs_no_data_batches, watermark_moves
from misa.runtime.no_data_batches import NoDataBatches, SparkWatermark, has_watermark, no_data_batches_enabled
from misa.state.store import EMPTY_VERSION


class WatermarkSync:
    """Spark's watermark and batches without data for ``operator``; ``partitions`` is the key partitions'
    operator (:class:`~misa.parallel.partitioned.PartitionedOperator`) when the state runs as partitions."""

    def __init__(self, no_data: NoDataBatches, operator: StatefulOperator, partitions: Any = None):
        self.no_data = no_data
        self._operator = operator
        self._partitions = partitions
        self._spark_watermark: SparkWatermark | None = None  # the running query's, when its stream has withWatermark
        self._follows_spark = False  # whether the running query's stream has withWatermark (known before it starts)
        self._query_started = threading.Event()
        self._requested = EMPTY_VERSION  # the batch after which this run requested a batch without data
        self._no_data_batches = False  # whether Spark would run batches without data for the operator (at start)
        self._spark_moved: bool | None = None  # whether Spark's watermark moves after the running batch, once read

    # ------------------------------------------------------------------ a start
    def reset(self) -> None:
        """A new start: no query yet, no request (a restart forgets it, as Spark forgets its last plan)."""
        self._query_started.clear()
        self._requested = EMPTY_VERSION

    def watch(self, stream: DataFrame) -> None:
        """Follow Spark's watermark when ``stream`` has ``withWatermark`` (before the query starts)."""
        self._follows_spark = has_watermark(stream)

    def started(self, spark: SparkSession, query: StreamingQuery) -> None:
        """The query started: its watermark can be read, and batches without data asked for when Spark runs them."""
        self._spark_watermark = SparkWatermark(query) if self._follows_spark else None
        self._no_data_batches = runs_no_data_batches(self._operator) and no_data_batches_enabled(spark)
        self._query_started.set()

    # ------------------------------------------------------------------ a batch
    def without_data(self, batch_id: int, first: bool) -> bool:
        """Whether batch ``batch_id`` is a batch without data: asked for by this run after the batch before it (or
        the first batch of a start, ``first``), and made of the request alone in Spark's offsets log."""
        asked = first or self._requested == batch_id - 1
        return asked and self.no_data.is_no_data_batch(batch_id)

    def read_spark_moved(self) -> None:
        """Whether Spark's watermark moves after the running data batch (None: the stream has no withWatermark, or
        Spark runs no batches without data for the operator). Read once the jobs reading the batch ran (its
        watermark nodes saw every row: the deltas', the count's, the hints'), before its state phase: the commit
        thread is then idle, so the Py4J calls wait for no one (after the batch they waited on its RocksDB writes)."""
        spark_watermark = self._running_spark_watermark() if self._no_data_batches else None
        self._spark_moved = spark_watermark.moved() if spark_watermark is not None else None

    def follow(self) -> None:
        """When the stream has withWatermark, the operator's watermark for the batch is the one Spark planned it
        with: Spark's counts every row its withWatermark node saw, also those a join with a static table or a
        filter below the operator drops before misa sees them."""
        if not self._follows_spark:
            return
        spark_watermark = self._running_spark_watermark()
        assert spark_watermark is not None
        if self._partitions is not None:
            self._partitions.follow_watermark(spark_watermark.batch_us())
            return
        get = getattr(self._operator, "event_watermark", None)
        watermark = get() if callable(get) else None
        if watermark is not None:
            watermark.follow(spark_watermark.batch_us())

    def after_batch(self, batch_id: int) -> None:
        """After data batch ``batch_id``: ask Spark's trigger for a batch without data when Spark, running the
        operator itself, would run one once a trigger finds no input."""
        if self._no_data_batches and self._watermark_moved():
            self.no_data.request(batch_id)
            self._requested = batch_id

    def _watermark_moved(self) -> bool:
        """Whether the next batch's watermark is ahead of this batch's: Spark's, when the stream has withWatermark,
        else the operator's own (its watermark_delay)."""
        moved, self._spark_moved = self._spark_moved, None
        if moved is not None:
            return moved
        if self._partitions is not None:
            return self._partitions.watermark_moves()
        return watermark_moves(self._operator)

    def _running_spark_watermark(self) -> SparkWatermark | None:
        """The running query's Spark watermark (None: its stream has no withWatermark), once the query started."""
        if not self._query_started.wait(timeout=60):
            raise RuntimeError("the streaming query did not finish starting within 60 s of its first batch")
        return self._spark_watermark
