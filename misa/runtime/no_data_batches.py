"""Batches without data exactly when Spark runs them: decided by Spark's own trigger, for every source and trigger.

Spark runs a batch without data (its stateful operators evict with the new watermark; append mode emits what
closed) only when a trigger finds no new input on any source and the last batch's plan asks for one: a stateful
node whose input watermark moved (``shouldRunAnotherBatch``). A foreachBatch query has no stateful node, so
Spark never asks for misa. misa asks instead, and leaves the rest to Spark:

* misa's query reads one more source, :class:`NoDataBatchSource`, which never has rows. Its offset moves only
  when the runtime *requests* a batch (:meth:`NoDataBatches.request`), after a batch that left the watermark
  ahead of the one that batch evicted with (Spark's tracker says so, :class:`SparkWatermark`);
* at its next trigger Spark then constructs a batch as it would for the stateful query: with the other sources'
  new input when any arrived (a data batch, the request spent with it), else a batch of the request alone,
  which the runtime runs as the batch without data (:meth:`NoDataBatches.is_no_data_batch`, read from Spark's
  offsets log). It has Spark's batch id, so the sink sees Spark's numbering;
* but for one batch: Spark's first trigger of a new checkpoint counts any offset of a Python source as input, so
  the request source alone makes a batch 0 while no source of the query's own has input yet (a folder still
  empty), where the stateful query waits for its first input. misa runs nothing in that batch and calls no sink
  (:meth:`NoDataBatches.skips_first_batch`); the sink's batch ids are then Spark's less one, which is the
  stateful query's numbering. This is recorded at the checkpoint location, since Spark purges its offsets log;
* which sources have input, admission control (``maxFilesPerTrigger``, Kafka's limits), and the trigger's rules
  (``once`` runs one batch; ``availableNow`` ends when a trigger constructs none; processing time) are Spark's
  own. A restart forgets the request, as Spark forgets its last plan: after a restart Spark runs no batch without
  data before a data batch.
"""

from __future__ import annotations

import json
import logging
import posixpath
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from checkpoint.local import write_atomically
from common.location import Location
from misa.exceptions import ConfigError
from misa.runtime.no_data_source import NO_REQUEST, OFFSET_KEY, SOURCE_NAME, NoDataBatchSource

log = logging.getLogger(__name__)
NO_OFFSET = "-"  # an offsets log line of a source that had no offset yet (no input since the query began)
FIRST_BATCH_FILE = "misa-first-batch.json"  # at the checkpoint location: whether Spark's batch 0 was skipped


class SparkWatermark:
    """Spark's global watermark of the running query (its ``withWatermark`` nodes, the policy of
    ``spark.sql.streaming.multipleWatermarkPolicy``), read from Spark's own tracker."""

    def __init__(self, query: StreamingQuery):
        self.query = query
        self._execution: Any = None  # Spark's MicroBatchExecution and its tracker, fetched once (fewer Py4J calls)
        self._tracker: Any = None

    def _spark(self) -> Any:
        """Spark's MicroBatchExecution of the running query."""
        if self._execution is None:
            self._execution = self.query._jsq.streamingQuery()
        return self._execution

    def batch_us(self) -> int:
        """The watermark Spark planned the running batch with (its offsets log's ``batchWatermarkMs``), in µs."""
        try:
            return int(self._spark().lastExecution().offsetSeqMetadata().batchWatermarkMs()) * 1000
        except Exception as error:  # noqa: BLE001 - py4j's errors, or no JVM query (Spark Connect)
            raise _unavailable(error) from error

    def moved(self) -> bool:
        """Whether the next batch's watermark is ahead of the one the batch now ending ran with. Spark updates its
        tracker from the batch's plan when the sink returns; updating it from the same plan now gives the same."""
        try:
            if self._tracker is None:
                self._tracker = self._spark().watermarkTracker()
            last, tracker = self._spark().lastExecution(), self._tracker
            tracker.updateWatermark(last.executedPlan())
            return int(tracker.currentWatermark()) > int(last.offsetSeqMetadata().batchWatermarkMs())
        except Exception as error:  # noqa: BLE001 - py4j's errors, or no JVM query (Spark Connect)
            raise _unavailable(error) from error


def _unavailable(error: Exception) -> ConfigError:
    return ConfigError(
        f"misa reads the running query's watermark from Spark's own tracker (MicroBatchExecution.watermarkTracker) "
        f"to run batches without data exactly when Spark would and to drop the rows Spark drops, and this Spark does "
        f"not give it ({type(error).__name__}: {str(error).splitlines()[0][:200]}): run the job in classic PySpark "
        f"4.x (not Spark Connect)"
    )


class NoDataBatches:
    """Requests batches without data from Spark's trigger and tells them from data batches. ``requests`` is a file
    on the driver (read by Spark's Python source process); ``spark_checkpoint`` is where Spark writes its logs;
    ``checkpoint`` the checkpoint location, where the verdict on Spark's first batch is kept."""

    def __init__(self, requests: Path, spark_checkpoint: Location, checkpoint: Location):
        self.requests = requests
        self.fs, self.offsets = spark_checkpoint.filesystem()
        self.offsets = posixpath.join(self.offsets, "offsets")
        self.checkpoint = checkpoint

    def attach(self, spark: SparkSession, stream: DataFrame) -> DataFrame:
        """``stream`` with the request source unioned in (no rows, the same columns); no request pending. A checkpoint
        whose query ran without the request source (an earlier misa) is refused: Spark cannot add a source to it."""
        latest = self._latest()
        if latest is not None and not any(_is_request(line) for line in latest):
            raise ConfigError(
                f"the Spark checkpoint under {self.offsets} was written by a query without misa's source "
                f"{SOURCE_NAME!r} (an earlier misa, or plain Spark), and Spark cannot add a source to a checkpoint: "
                f"start the query from a new checkpoint location"
            )
        spark.dataSource.register(NoDataBatchSource)
        self._write(NO_REQUEST)
        requests = spark.readStream.format(SOURCE_NAME).schema(stream.schema).option("requests", str(self.requests))
        return stream.union(requests.load())

    def request(self, after_batch: int) -> None:
        """Ask for a batch without data after ``after_batch``, at Spark's next trigger that finds no input."""
        self._write(after_batch)

    def is_no_data_batch(self, batch_id: int) -> bool:
        """Whether Spark planned ``batch_id`` with no new input on any of the query's own sources (only the request
        source moved), from its offsets log."""
        if batch_id <= 0:
            return False
        now, before = self._offsets(batch_id), self._offsets(batch_id - 1)
        if now is None or before is None or len(now) != len(before):
            return False
        moved = [i for i, (a, b) in enumerate(zip(now, before)) if a != b]
        return bool(moved) and all(_is_request(now[i]) for i in moved)

    def skips_first_batch(self) -> bool:
        """At Spark's batch 0: whether the stateful query would not run it (no source of the query's own had an
        offset when Spark planned it, only the request source), recorded for :meth:`first_batch_skipped`."""
        lines = self._offsets(0)
        skipped = lines is not None and all(line == NO_OFFSET for line in lines if not _is_request(line))
        fs, path = self.checkpoint.child(FIRST_BATCH_FILE).filesystem()
        if skipped:
            data = json.dumps({"skipped": True}).encode()
            if self.checkpoint.local is None:
                fs.pipe_file(path, data)
            else:
                write_atomically(self.checkpoint.local / FIRST_BATCH_FILE, data)
        elif fs.exists(path):  # an earlier query's, at a checkpoint location whose Spark log was removed
            fs.rm_file(path)
        return skipped

    def first_batch_skipped(self) -> bool:
        """Whether the checkpoint's batch 0 was one the stateful query would not run (:meth:`skips_first_batch`)."""
        fs, path = self.checkpoint.child(FIRST_BATCH_FILE).filesystem()
        try:
            return bool(json.loads(fs.cat_file(path))["skipped"])
        except FileNotFoundError:
            return False

    def _latest(self) -> list[str] | None:
        """The newest offsets entry's per-source lines (None: Spark has planned no batch yet)."""
        self.fs.invalidate_cache(self.offsets)
        try:
            names = [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.offsets, detail=False)]
        except FileNotFoundError:
            return None
        numbers = [int(n) for n in names if n.isdigit()]
        return self._offsets(max(numbers)) if numbers else None

    def _offsets(self, batch_id: int) -> list[str] | None:
        """The per-source offset lines of offsets entry ``batch_id`` (None: not in the log)."""
        try:
            text = self.fs.cat_file(posixpath.join(self.offsets, str(batch_id))).decode()
        except FileNotFoundError:
            return None
        return text.splitlines()[2:]  # a version line, the batch's metadata, then one line per source

    def _write(self, after_batch: int) -> None:
        """The request file, read whole by Spark's source process; rewritten at each start (no fsync: a crash that
        leaves an older request loses nothing, as :meth:`attach` resets it)."""
        write_atomically(self.requests, json.dumps({OFFSET_KEY: after_batch}).encode(), durable=False)


def has_watermark(stream: DataFrame) -> bool:
    """Whether ``stream``'s plan has a ``withWatermark`` node (so Spark keeps a watermark for the query)."""
    stack = [stream._jdf.queryExecution().analyzed()]
    while stack:
        node = stack.pop()
        if node.nodeName() == "EventTimeWatermark":
            return True
        children = node.children().iterator()
        while children.hasNext():
            stack.append(children.next())
    return False


def no_data_batches_enabled(spark: SparkSession) -> bool:
    """Spark's ``spark.sql.streaming.noDataMicroBatches.enabled`` (true by default): false, and Spark runs none."""
    return spark.conf.get("spark.sql.streaming.noDataMicroBatches.enabled", "true").strip().lower() == "true"


def _is_request(line: str) -> bool:
    try:
        offset = json.loads(line)
    except ValueError:
        return False
    return isinstance(offset, dict) and OFFSET_KEY in offset
