"""A sink that hands each batch's output to any DataFrame writer (Delta, Parquet, JDBC, Kafka).

The runtime calls a sink with ``(batch_id, pyarrow.Table)``; :class:`DataFrameSink` turns the table
into a Spark DataFrame of the active session and calls ``write(df, batch_id)``, the signature of
Spark's own ``foreachBatch`` function. A batch may be written again with the same id after a
failure (docs/extending.md): ``write`` must replace that batch's earlier output, not add to it.
"""

from __future__ import annotations

from typing import Callable, Protocol, runtime_checkable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

Writer = Callable[[DataFrame, int], None]


@runtime_checkable
class FrameSink(Protocol):
    """A sink that also writes a batch given as a DataFrame (the state on the executors hands it one read from the
    state hosts, so the rows never pass the driver)."""

    def write_frame(self, batch_id: int, frame: DataFrame) -> None: ...


class DataFrameSink:
    """Calls ``write(df, batch_id)`` with each batch's output as a DataFrame (of ``spark``, by default the
    session active when the batch runs)."""

    def __init__(self, write: Writer, spark: SparkSession | None = None):
        self.write = write
        self.spark = spark

    def __call__(self, batch_id: int, table: pa.Table) -> None:
        spark = self.spark or SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError(
                "DataFrameSink has no active Spark session: call it in a query or give DataFrameSink(write, spark)"
            )
        self.write(spark.createDataFrame(table), batch_id)

    def write_frame(self, batch_id: int, frame: DataFrame) -> None:
        """Write the batch's rows given as a DataFrame."""
        self.write(frame, batch_id)
