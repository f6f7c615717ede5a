"""A batch's input as the runtime reads it: its bad records set aside (:class:`BadRecordFilter`), its records and
bad records counted by whichever Spark job reads the batch first, and the batch's record started with the counts.
"""

from __future__ import annotations

import time
from typing import Protocol

from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F

from misa.obs.records import BatchRecord

_INPUT_ROWS, _BAD_ROWS = "input_rows", "bad_records"


class BadRecordFilter(Protocol):
    """Sets a batch's malformed records aside: counted while the batch's delta job runs, written only when present."""

    def good(self, batch: DataFrame) -> DataFrame:
        """The batch's good rows."""

    def bad_count(self) -> Column:
        """An aggregate expression counting the batch's bad records (observed during the delta job)."""

    def write_aside(self, batch: DataFrame, batch_id: int, bad: int) -> None:
        """Write the batch's ``bad`` bad records aside, idempotent per batch id (none: clear an earlier attempt's)."""


class BatchInput:
    """The batches' input through ``bad_records`` (None: every record is good)."""

    def __init__(self, bad_records: BadRecordFilter | None):
        self.bad_records = bad_records

    def good(self, rows: DataFrame) -> DataFrame:
        """``rows`` without their bad records."""
        return self.bad_records.good(rows) if self.bad_records else rows

    def observed(self, batch: DataFrame, batch_id: int) -> tuple[DataFrame, Observation]:
        """The batch with its record count (and bad-record count) observed by whichever job reads it first."""
        observation = Observation(f"misa_input_{batch_id}_{time.monotonic_ns()}")
        return batch.observe(observation, *self._counts()), observation

    def _counts(self) -> list[Column]:
        """The batch's record count (and bad-record count), as aggregate expressions."""
        counts = [F.count(F.lit(1)).alias(_INPUT_ROWS)]
        if self.bad_records is not None:
            counts.append(self.bad_records.bad_count().alias(_BAD_ROWS))
        return counts

    def record(self, batch: DataFrame, batch_id: int, observation: Observation, deltas: int) -> BatchRecord:
        """The batch's record, started with its observed counts; bad records are written aside here, under
        ``batch_id`` as the sink numbers the batch.

        Spark leaves the observation unfilled when the delta job's plan is cut short: a batch without rows
        is pruned to an empty relation, and rows that yield no deltas leave a shuffle empty, after which
        adaptive execution skips the stages that would report it (reading it then fails). So a batch
        that yielded no deltas is counted by one more small Spark job, only for such batches."""
        counts = batch.agg(*self._counts()).first().asDict() if deltas == 0 else observation.get
        if self.bad_records is None:
            return BatchRecord(input_rows=int(counts[_INPUT_ROWS]))
        bad = int(counts.get(_BAD_ROWS) or 0)
        self.bad_records.write_aside(batch, batch_id, bad)
        return BatchRecord(input_rows=int(counts[_INPUT_ROWS]), bad_records=bad)
