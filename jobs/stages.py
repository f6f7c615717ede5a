"""A stateless stage the jobs run twice: in Spark for the batch, and in Arrow on the driver for hints read ahead.

:class:`TimedFilter` keeps the rows whose ``column`` equals ``value`` and adds an event timestamp made from an
integer time column. Written once, it is Cluster Monitoring's, Linear Road's and YSB's stage before the
stateful operator in both engines, so the hint rows read ahead on the driver
(:func:`misa.io.json_arrow.read_json_lines_arrow`) name the keys the batch will read.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

EVENT_TIME = "event_time"
_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}


@dataclass(frozen=True)
class TimedFilter:
    """Rows where ``column == value`` (every row when ``column`` is None), with the timestamp column ``into`` made
    from the integer column ``time`` in ``unit`` (``s``, ``ms`` or ``us``)."""

    time: str
    unit: str
    column: str | None = None
    value: int | str | None = None
    into: str = EVENT_TIME

    def __post_init__(self) -> None:
        if self.unit not in _MICROS:
            raise ValueError(f"unit must be one of {sorted(_MICROS)}, not {self.unit!r}")

    def spark(self, events: DataFrame) -> DataFrame:
        """The stage in Spark."""
        rows = events.where(F.col(self.column) == self.value) if self.column else events
        return rows.withColumn(self.into, F.timestamp_micros(F.col(self.time).cast("long") * _MICROS[self.unit]))

    def arrow(self, events: pa.Table) -> pa.Table:
        """The stage in Arrow (rows without a time get none, as in Spark)."""
        rows = events.filter(pc.equal(events[self.column], self.value)) if self.column else events
        micros = pc.multiply(rows[self.time].cast(pa.int64()), _MICROS[self.unit])
        return rows.append_column(self.into, micros.cast(pa.timestamp("us", "UTC")))
