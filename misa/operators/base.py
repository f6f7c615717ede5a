"""What every stateful operator is to the runtime: the protocol, its per-batch result, and the delta columns.

An operator has a Spark part (:meth:`StatefulOperator.deltas`, on the executors) and a driver part
(:meth:`StatefulOperator.apply`, merging the deltas into the state). Aggregating operators' deltas
carry the columns named here: the rows folded into each delta row, their latest event time and,
for windows, the window's bounds or, for sliding windows, the pane's end (all times in microseconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from misa.config import parse_seconds
from misa.state.view import StateView

ROWS, MAX_EVENT, WINDOW_START, WINDOW_END = "_rows", "_max_event_us", "_window_start_us", "_window_end_us"
PANE_END = "_pane_end_us"  # sliding windows: the end of the delta's pane


def micros(duration: str | None) -> int | None:
    """A duration ("30 seconds", "1s") in microseconds; None stays None."""
    return int(parse_seconds(duration) * 1_000_000) if duration else None


@dataclass
class OperatorResult:
    """What one batch's merge produced."""

    output: pa.Table
    late_rows: int = 0
    state_reads: int = 0
    dropped_rows: int = 0  # input rows the operator could not use (each operator says which); logged too
    closed_windows: int = 0


class StatefulOperator(Protocol):
    """An operator the runtime drives once per micro-batch."""

    def deltas(self, batch: DataFrame) -> DataFrame:
        """The Spark part: per-key deltas of this batch (runs on the executors)."""

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """The driver part: merge the deltas into state and return the batch's output rows."""

    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Resolve the operator against the schema of its input (the upstream's output) before the query
        starts: raise :class:`misa.operators.schema.AnalysisError` for a missing column or a type it cannot
        use; return its signature, a JSON dict of what shapes its state (kind, key columns and types, ...),
        recorded with each version and compared at start (:mod:`misa.runtime.compat`)."""

    def metadata(self) -> dict[str, Any]:
        """Operator state stored with each version (for example the watermark)."""

    def restore(self, metadata: dict[str, Any]) -> None:
        """Resume from the metadata of a loaded version."""
