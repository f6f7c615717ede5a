"""Stateful operators in a chain: each one's output of a batch is the next one's input in the same batch.

Spark (3.4+, ``spark.sql.streaming.statefulOperator.allowMultiple``, the default) runs a query with several stateful
operators one above the other: a batch's rows go through the lowest, its output (the rows it emits in append mode)
through the next, and so on, all in the batch, with every operator's state committed as one version. Their
watermarks are propagated (Spark's ``PropagateWatermarkSimulator``): the lowest operator's input watermark is the
query's global one; each operator's output watermark is ``produceOutputWatermark`` of its input watermark (an
aggregation's or a deduplication's: the input's; a stream-stream join's: the least of its sides' state watermarks
and its input's), the next operator's input watermark. Each operator judges late rows by its input watermark of the
batch before and evicts by the batch's own (:class:`~misa.operators.watermark.PropagatedWatermark` for all but the
lowest, whose watermark follows Spark's as a single operator's does).

:class:`OperatorChain` is one operator to the runtime: its deltas are the lowest operator's, its state phase runs
the operators in order, turning each one's output into the next one's deltas with a Spark job of the batch
(:class:`Link`'s ``feed``, built by the query's translation), and its state is theirs, each in its own key range
(:class:`PrefixedView`), stored in the one checkpoint; its metadata holds each operator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from misa.operators.base import OperatorResult, runs_no_data_batches
from misa.operators.processor import StatefulProcessorOperator
from misa.operators.watermark import EventTimeWatermark, InputsWatermark, PropagatedWatermark
from misa.state.view import StateView

CHAIN_KEY = b"\xfc"  # every key of a chain's operators starts with it and the operator's position


class PrefixedView:
    """One operator's part of the state view: its keys behind ``prefix`` (the operator sees them without it)."""

    def __init__(self, view: StateView, prefix: bytes):
        self.view = view
        self.prefix = prefix

    def get_many(self, keys: Sequence[bytes], ts: Sequence[int] | int = 0) -> list[bytes | None]:
        return self.view.get_many([self.prefix + k for k in keys], ts)

    def put_many(self, keys: Sequence[bytes], values: Sequence[bytes | None]) -> None:
        self.view.put_many([self.prefix + k for k in keys], values)

    def delete_range(self, begin: bytes, end: bytes) -> None:
        self.view.delete_range(self.prefix + begin, self.prefix + end)

    def scan(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        cut = len(self.prefix)
        return [(k[cut:], v) for k, v in self.view.scan(self.prefix + begin, self.prefix + end)]


@dataclass
class Link:
    """An operator above another in the chain: ``feed`` turns the operator below's output rows of a batch into this
    operator's input (a DataFrame of the steps between the two, run by Spark), of schema ``schema``."""

    operator: Any
    feed: Callable[[pa.Table], DataFrame]
    schema: T.StructType


class OperatorChain:
    """``first`` (the operator reading the query's source) and the ``links`` above it, run as one operator."""

    def __init__(self, first: Any, links: list[Link]):
        self.first = first
        self.links = links
        for link in links:
            watermark = getattr(link.operator, "watermark", None)
            if isinstance(watermark, EventTimeWatermark) and not isinstance(watermark, PropagatedWatermark):
                link.operator.watermark = PropagatedWatermark(watermark.delay_ms)

    def __reduce__(self) -> Any:
        """Not pickled: its links' feeds run Spark jobs of the query's session (the state data sources, which load
        a recorded operator, say so rather than read it)."""
        raise TypeError("an operator chain's links feed each operator with Spark jobs of the query's session")

    @property
    def operators(self) -> list[Any]:
        return [self.first, *(link.operator for link in self.links)]

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        signatures = [self.first.signature(schema), *(link.operator.signature(link.schema) for link in self.links)]
        return {"operator": "OperatorChain", "operators": signatures}

    # ------------------------------------------------------------------ a batch
    def deltas(self, batch: DataFrame) -> DataFrame:
        return self.first.deltas(batch)

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """The lowest operator merges the batch's deltas; each one above takes the output below as its input."""
        return self._above(self.first.apply(deltas, self._view(state, 0)), state)

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """Spark's batch without data: the lowest operator evicts (append mode emits what closed), and each operator
        above runs on what the one below emitted, evicting by its own input watermark."""
        run = getattr(self.first, "no_data_batch", None)
        below = run(self._view(state, 0)) if callable(run) else OperatorResult(pa.table({}))
        return self._above(below, state)

    def _above(self, below: OperatorResult, state: StateView) -> OperatorResult:
        total = OperatorResult(below.output, below.late_rows, below.state_reads, below.dropped_rows)
        total.closed_windows = below.closed_windows
        watermark = self._output_watermark(self.first)
        for position, link in enumerate(self.links, start=1):
            operator = link.operator
            if watermark is not None and isinstance(operator.watermark, PropagatedWatermark):
                operator.watermark.next_us = max(watermark, 0)
            deltas = operator.deltas(link.feed(below.output)).toArrow()
            below = operator.apply(deltas, self._view(state, position))
            total.output = below.output
            total.late_rows += below.late_rows
            total.state_reads += below.state_reads
            total.dropped_rows += below.dropped_rows
            total.closed_windows += below.closed_windows
            watermark = self._output_watermark(operator)
        return total

    @staticmethod
    def _output_watermark(operator: Any) -> int | None:
        """The operator's output watermark of the running batch (None: it has no watermark)."""
        get = getattr(operator, "event_watermark", None)
        watermark = get() if callable(get) else None
        if watermark is None:
            return None
        produce = getattr(operator, "output_watermark", None)
        return int(produce(watermark.at_us)) if callable(produce) else int(watermark.at_us)

    @staticmethod
    def _view(state: StateView, position: int) -> Any:
        return PrefixedView(state, CHAIN_KEY + bytes([position]))

    # ------------------------------------------------------------------ watermarks and batches without data
    def event_watermark(self) -> EventTimeWatermark | InputsWatermark | None:
        """The lowest operator's, which follows Spark's global watermark."""
        get = getattr(self.first, "event_watermark", None)
        return get() if callable(get) else None

    def spark_runs_no_data_batches(self) -> bool:
        """Spark runs a batch without data when any of its stateful operators would; none above
        applyInPandasWithState gets a watermark (Spark's ``FlatMapGroupsWithStateExec`` propagates none)."""
        reached = []
        for operator in self.operators:
            reached.append(operator)
            if isinstance(operator, StatefulProcessorOperator):
                break
        return any(runs_no_data_batches(operator) for operator in reached)

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        return {"chain": [operator.metadata() for operator in self.operators]}

    def restore(self, metadata: dict[str, Any]) -> None:
        parts = metadata.get("chain") or [{}] * len(self.operators)
        for operator, part in zip(self.operators, parts):
            operator.restore(part)
