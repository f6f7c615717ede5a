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

A stream-stream join above another operator reads the batch's rows of its other side too: the job's source carries
them past the operators below (:func:`carried_source`: each row packed as the lowest operator's, :data:`OWN`, or the
other side's, :data:`CARRIED`), the chain's deltas keep them beside the lowest operator's, and the join's input is the
operator below's output (its ``feed``) with them; when that other side has stateful operators of its own, they run as
a chain of their own (:attr:`Link.side`) on the carried deltas, their state behind :data:`SIDE_KEY`, their output the
join's other side (``side_feed``), and the join's input watermark the least of the two sides' output watermarks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.operators.base import OperatorResult, runs_no_data_batches
from misa.operators.processor import StatefulProcessorOperator
from misa.operators.schema import nullable, nullable_fields
from misa.operators.watermark import (
    EventTimeWatermark,
    InputsWatermark,
    Propagated,
    PropagatedInputsWatermark,
    PropagatedWatermark,
)
from misa.state.view import StateView

CHAIN_KEY = b"\xfc"  # every key of a chain's operators starts with it and the operator's position
SIDE_KEY = CHAIN_KEY + b"\xff"  # and a join's other side's operators, behind it (Link.side)
OWN, CARRIED = "_misa_own", "_misa_carried"  # a source's rows for the lowest operator; for a join above (Link)


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
    operator's input (a DataFrame of the steps between the two, run by Spark), of schema ``schema``; ``carries``: a
    join whose other side's rows of the batch the chain's source carries past the operators below (:data:`CARRIED`):
    the join's input rows of that side, or those of the chain ``side`` whose output ``side_feed`` turns into them."""

    operator: Any
    feed: Callable[[pa.Table], DataFrame]
    schema: T.StructType
    carries: bool = False
    side: OperatorChain | None = None  # a join's other side, when it is stateful operations of its own (carried)
    side_feed: Callable[[pa.Table], DataFrame] | None = None  # their output as the join's other side's rows


def carried_source(own: DataFrame, carried: DataFrame) -> DataFrame:
    """A chain's source when a join above reads rows the operators below do not (its other side): the lowest
    operator's rows ``own`` as a struct :data:`OWN`, and the ``carried`` rows (the join's input columns) as a struct
    :data:`CARRIED`, the other null in each row."""
    own_row = F.struct(*[own[c] for c in own.columns])
    carried_row = F.struct(*[carried[c] for c in carried.columns])
    own_type = nullable(own.select(own_row.alias(OWN)).schema[OWN].dataType)
    carried_type = nullable(carried.select(carried_row.alias(CARRIED)).schema[CARRIED].dataType)
    own = own.select(own_row.cast(own_type).alias(OWN), F.lit(None).cast(carried_type).alias(CARRIED))
    carried = carried.select(F.lit(None).cast(own_type).alias(OWN), carried_row.cast(carried_type).alias(CARRIED))
    return own.unionByName(carried)


def _carried_apart(deltas: pa.Table) -> tuple[pa.Table, pa.Table | None]:
    """A chain's deltas as the lowest operator's and the carried ones (None: the chain carries none)."""
    if CARRIED not in deltas.column_names:
        return deltas, None
    column = deltas[CARRIED]
    carried = pc.is_valid(column)
    own = deltas.filter(pc.invert(carried)).drop_columns([CARRIED])
    return own, pa.Table.from_struct_array(column.filter(carried).combine_chunks())


def _packed(rows: DataFrame, name: str) -> DataFrame:
    """``rows`` as one struct column ``name`` whose fields may all be null (it is null in the other rows)."""
    row = F.struct(*[rows[c] for c in rows.columns])
    return rows.select(row.cast(nullable(rows.select(row.alias(name)).schema[name].dataType)).alias(name))


class OperatorChain:
    """``first`` (the operator reading the query's source) and the ``links`` above it, run as one operator."""

    def __init__(self, first: Any, links: list[Link]):
        self.first = first
        self.links = links
        self.carries = any(link.carries for link in links)
        self.carrier = next((link for link in links if link.carries), None)
        for link in links:
            watermark = getattr(link.operator, "watermark", None)
            if isinstance(watermark, EventTimeWatermark) and not isinstance(watermark, PropagatedWatermark):
                link.operator.watermark = PropagatedWatermark(watermark.delay_ms)
            elif isinstance(watermark, InputsWatermark) and not isinstance(watermark, PropagatedInputsWatermark):
                link.operator.watermark = PropagatedInputsWatermark(watermark.delays_ms, watermark.policy)

    def __reduce__(self) -> Any:
        """Not pickled: its links' feeds run Spark jobs of the query's session (the state data sources, which load
        a recorded operator, say so rather than read it)."""
        raise TypeError("an operator chain's links feed each operator with Spark jobs of the query's session")

    @property
    def operators(self) -> list[Any]:
        return [self.first, *(link.operator for link in self.links)]

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        own = schema[OWN].dataType if self.carries else schema  # type: ignore[union-attr]
        signatures = [self.first.signature(own), *(link.operator.signature(link.schema) for link in self.links)]
        side = self.carrier.side if self.carrier else None
        sides = [side.signature(schema[CARRIED].dataType)] if side else []  # type: ignore[arg-type]
        return {"operator": "OperatorChain", "operators": signatures, **({"sides": sides} if sides else {})}

    # ------------------------------------------------------------------ a batch
    def deltas(self, batch: DataFrame) -> DataFrame:
        """The lowest operator's deltas (and the carried rows, beside them: :func:`carried_source`)."""
        if not self.carries:
            return self.first.deltas(batch)
        own = self.first.deltas(batch.where(F.col(OWN).isNotNull()).select(f"{OWN}.*"))
        carried = batch.where(F.col(CARRIED).isNotNull()).select(f"{CARRIED}.*")
        side = self.carrier.side if self.carrier else None
        carried = _packed(side.deltas(carried) if side else carried, CARRIED)
        return own.unionByName(carried, allowMissingColumns=True)

    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """The lowest operator merges the batch's deltas; each one above takes the output below as its input (a join
        with the carried rows too)."""
        own, carried = _carried_apart(deltas)
        spark_us = self._spark_watermark()
        return self._above(self.first.apply(own, self._view(state, 0)), state, carried, spark_us)

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """Spark's batch without data: the lowest operator evicts (append mode emits what closed), and each operator
        above runs on what the one below emitted, evicting by its own input watermark."""
        spark_us = self._spark_watermark()
        return self._above(self._no_data_of(self.first, self._view(state, 0)), state, None, spark_us)

    @staticmethod
    def _no_data_of(operator: Any, view: Any) -> OperatorResult:
        run = getattr(operator, "no_data_batch", None)
        return run(view) if callable(run) else OperatorResult(pa.table({}))

    def _spark_watermark(self) -> int | None:
        """Spark's watermark for the running batch when the runtime gave it (the lowest operators follow it)."""
        watermark = self.event_watermark()
        return getattr(watermark, "spark_next_us", None)

    def _above(
        self, below: OperatorResult, state: StateView, carried: pa.Table | None, spark_us: int | None
    ) -> OperatorResult:
        total = OperatorResult(below.output, below.late_rows, below.state_reads, below.dropped_rows)
        total.closed_windows = below.closed_windows
        watermark = self._output_watermark(self.first)
        for position, link in enumerate(self.links, start=1):
            operator = link.operator
            if link.side is not None:  # the join's other side: its own operators first, on the carried deltas
                side, watermark = self._side_rows(link, PrefixedView(state, SIDE_KEY), carried, spark_us, watermark)
                carried = side
            if watermark is not None and isinstance(operator.watermark, Propagated):
                operator.watermark.next_us = max(watermark, 0)
            deltas = nullable_fields(operator.deltas(link.feed(below.output))).toArrow()
            if link.carries and carried is not None:
                schema = pa.schema([f.with_nullable(True) for f in deltas.schema])  # a side's row: null in the other's
                deltas = pa.concat_tables([deltas.cast(schema), carried.select(schema.names).cast(schema)])
            below = operator.apply(deltas, self._view(state, position))
            total.output = below.output
            total.late_rows += below.late_rows
            total.state_reads += below.state_reads
            total.dropped_rows += below.dropped_rows
            total.closed_windows += below.closed_windows
            watermark = self._output_watermark(operator)
        return total

    @staticmethod
    def _side_rows(
        link: Link, view: Any, deltas: pa.Table | None, spark_us: int | None, watermark: int | None
    ) -> tuple[pa.Table, int | None]:
        """The join's other side's rows of the batch, the output of its own operators (``link.side``, run on the
        carried ``deltas``, or as a batch without data), and the join's input watermark: the least of the two
        sides' output watermarks (Spark's ``PropagateWatermarkSimulator``)."""
        side, feed = link.side, link.side_feed
        assert side is not None and feed is not None
        follows = side.event_watermark()
        if spark_us is not None and follows is not None:
            follows.follow(spark_us)
        result = side.no_data_batch(view) if deltas is None else side.apply(deltas, view)
        marks = [m for m in (watermark, side.top_watermark()) if m is not None]
        return feed(result.output).toArrow(), min(marks) if marks else None

    def top_watermark(self) -> int | None:
        """The highest operator's output watermark of the running batch (None: it has none)."""
        return self._output_watermark(self.operators[-1])

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
        side = self.carrier.side if self.carrier else None
        return any(runs_no_data_batches(operator) for operator in reached) or bool(
            side and side.spark_runs_no_data_batches()
        )

    # ------------------------------------------------------------------ versions
    def metadata(self) -> dict[str, Any]:
        side = self.carrier.side if self.carrier else None
        return {
            "chain": [operator.metadata() for operator in self.operators],
            **({"side": side.metadata()} if side else {}),
        }

    def restore(self, metadata: dict[str, Any]) -> None:
        parts = metadata.get("chain") or [{}] * len(self.operators)
        for operator, part in zip(self.operators, parts):
            operator.restore(part)
        if self.carrier and self.carrier.side:
            self.carrier.side.restore(metadata.get("side") or {})
