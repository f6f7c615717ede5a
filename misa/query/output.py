"""misa's output of a batch in the shape of Spark's stateful node, then what the query does above it.

The operator's rows become the node's columns in Spark's order and types (a window as Spark's
``struct<start, end>``; a key misa holds as its text, :mod:`misa.query.key_text`, decoded to Spark's value; an
aggregation's outputs that compute over its aggregates by the translation's projection); the projections and
filters above the node (``select``, ``where``, ``withColumn`` after the aggregation) run on them in Spark, as SQL
read from the analyzed plan, and the sink gets the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from misa.exceptions import UnsupportedQueryError
from misa.io.dataframe_sink import FrameSink
from misa.io.spread import PartWriter, SpreadRows, SpreadSink
from misa.operators.aggregation import OUTPUT_WINDOW
from misa.query.key_text import decode_keys
from misa.query.plan import PlanNode, with_attributes
from misa.query.translation import Translation
from misa.runtime.batch_loop import Sink


class QueryOutput:
    """Turns each batch's operator output into the query's output and hands it to ``sink``."""

    def __init__(self, spark: SparkSession, translation: Translation, node: PlanNode, sink: Sink):
        self.spark = spark
        self.translation = translation
        self.node = node
        self.names = [a.name for a in node.output]  # a join's two sides may share names: misa's rows have its own
        own = [c.name for c in translation.output] if translation.join_inputs else self.names
        self.schema = T.StructType([T.StructField(name, a.dtype) for name, a in zip(own, node.output)])
        self.steps: list[tuple[str, list[str | Column]]] = translation.above
        if translation.projection is not None:  # the operator's columns, then the node's computed from them
            self.schema = translation.projection.columns
            self.steps = [("select", [*translation.projection.select]), *translation.above]
        self.arrow_schema = to_arrow_schema(self.schema, timezone="UTC", prefers_large_types=False)
        self.node_columns = tuple((c.kind, c.source) for c in translation.output)  # each one's kind and source
        self.sink = sink
        self.picks = translation.picks if self.steps else None  # steps that only select columns run in Arrow
        self.picked_schema = self.check()
        self.arrow_shape = self._arrow_shape()

    def check(self) -> pa.Schema | None:
        """Apply the steps above the stateful node to an empty batch: a step Spark cannot run again from its SQL
        (or a projection that does not give the node's types) fails here, at start, naming the step. When the
        steps only select columns, the Arrow schema Spark gives their output (the picked columns are cast to it)."""
        empty = self.spark.createDataFrame([], self.schema)
        rows = self._steps_on(empty, checking=True)
        projection = self.translation.projection
        types = [a.dtype for a in self.node.output]
        if projection is not None and [f.dataType for f in _step(empty, "select", projection.select).schema] != types:
            raise UnsupportedQueryError(
                f"[MISA_UNSUPPORTED_QUERY] misa cannot run {self.translation.stateful!r}: its outputs "
                f"{projection.select} computed from misa's aggregates are not of Spark's types {types}. Write "
                "instead: the aggregates alone in agg(...) and the expressions in a select(...) after it."
            )
        return rows.toArrow().schema if self.picks is not None else None

    def _arrow_shape(self) -> ArrowShape | None:
        """The query's output rows of the operator's in Arrow alone, when no step above the node needs Spark."""
        if self.steps and self.picked_schema is None:
            return None
        picks = tuple(self.picks) if self.picked_schema is not None else None  # type: ignore[arg-type]
        return ArrowShape(self.node_columns, self.arrow_schema, tuple(self.names), picks, self.picked_schema)

    def __call__(self, batch_id: int, table: pa.Table) -> None:
        self.sink(batch_id, self.shape(table))

    def write_spread(self, batch_id: int, rows: SpreadRows) -> bool:
        """The operator's output left on the state hosts, shaped by each host and written there by a sink that
        writes so (:class:`~misa.io.spread.SpreadSink`), when no step above the node needs Spark; False: not so."""
        if self.arrow_shape is None or not isinstance(self.sink, SpreadSink):
            return False
        return self.sink.write_spread(batch_id, ShapedRows(rows, self.arrow_shape))

    def write_frame(self, batch_id: int, frame: DataFrame) -> None:
        """The operator's output given as a DataFrame (read from the state hosts by Spark's tasks): shaped and
        stepped in Spark, then to a sink that writes DataFrames as one, else to the sink as a table."""
        columns, arrow_schema = self.node_columns, self.arrow_schema

        def shaped(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                yield from node_rows(pa.Table.from_batches([batch]), columns, arrow_schema).to_batches()

        rows = frame.mapInArrow(shaped, self.schema)
        if self.steps:
            rows = self._steps_on(rows)
        else:
            rows = rows.toDF(*self.names)
        if isinstance(self.sink, FrameSink):
            self.sink.write_frame(batch_id, rows)
        else:
            self.sink(batch_id, rows.toArrow())

    def shape(self, table: pa.Table) -> pa.Table:
        """The query's output rows of the operator's output ``table``."""
        if self.arrow_shape is not None:
            return self.arrow_shape(table)
        return self._stepped(self._node_rows(table)).toArrow()

    def frame(self, table: pa.Table) -> DataFrame:
        """The query's output rows of the operator's output ``table`` as a DataFrame (in a chain of stateful
        operators, the next operator's input: :mod:`misa.operators.chain`)."""
        table = self._node_rows(table)
        if not self.steps:  # the node's own attributes, which the plan's expressions above it read
            return self._rows(self.spark.createDataFrame(table if table.num_rows else [], self.schema))
        return self._stepped(table)

    def _node_rows(self, table: pa.Table) -> pa.Table:
        """The operator's rows as the stateful node's columns."""
        return node_rows(table, self.node_columns, self.arrow_schema)

    def _stepped(self, table: pa.Table) -> DataFrame:
        """The steps above the node run by Spark on the node's rows ``table``."""
        return self._steps_on(self.spark.createDataFrame(table if table.num_rows else [], self.schema))

    def _steps_on(self, rows: DataFrame, checking: bool = False) -> DataFrame:
        """The steps above the node run by Spark on ``rows`` (the operator's columns when the node's are computed
        from them: that projection first); ``checking``: at start, a step that fails is refused, naming it."""
        steps = self.steps
        if self.translation.projection is not None:
            rows, steps = self._step(rows, *steps[0], checking), steps[1:]
        rows = self._rows(rows)
        for kind, texts in steps:
            rows = self._step(rows, kind, texts, checking)
        return rows

    def _step(self, rows: DataFrame, kind: str, texts: list[str | Column], checking: bool) -> DataFrame:
        if not checking:
            return _step(rows, kind, texts)
        try:
            return _step(rows, kind, texts)
        except Exception as error:  # noqa: BLE001 - any failure is the step's, reported with it
            raise UnsupportedQueryError(
                f"[MISA_UNSUPPORTED_QUERY] misa cannot run the {kind} {texts} after {self.translation.stateful!r} "
                f"on its output ({type(error).__name__}: {str(error).splitlines()[0]}). Write instead: the "
                "step with built-in functions of the columns, or run it in your sink."
            ) from error

    def _rows(self, rows: DataFrame) -> DataFrame:
        """The node's rows for the steps above: as the node's own attributes when the steps are the plan's own
        expressions, which read them (a join's: its two sides may share names; an operation's below another in a
        chain), else by name (the steps are SQL)."""
        return with_attributes(rows, self.node) if self.translation.own_attributes else rows


@dataclass(frozen=True)
class ArrowShape:
    """The query's output rows of the operator's, in Arrow alone (no step above the stateful node, or steps that only
    pick columns): the node's ``columns`` (kind and source column each) of the Arrow ``schema``, named ``names``,
    then the ``picks`` of them as ``picked_schema`` (None: no picking). Picklable: a state host shapes its rows."""

    columns: tuple[tuple[str, str], ...]
    schema: pa.Schema
    names: tuple[str, ...]
    picks: tuple[int, ...] | None = None
    picked_schema: pa.Schema | None = None

    def __call__(self, table: pa.Table) -> pa.Table:
        table = node_rows(table, self.columns, self.schema)
        if self.picked_schema is None:
            return table.rename_columns(list(self.names))
        return table.select(list(self.picks or ())).rename_columns(self.picked_schema.names).cast(self.picked_schema)


@dataclass(frozen=True)
class ShapedRows:
    """Output rows left on the state hosts (:class:`~misa.io.spread.SpreadRows`), each host's shaped by ``shape``
    before it is written."""

    rows: SpreadRows
    shape: ArrowShape

    @property
    def hosts(self) -> int:
        return self.rows.hosts

    @property
    def schema(self) -> pa.Schema | None:
        operator = self.rows.schema
        return None if operator is None else self.shape(operator.empty_table()).schema

    def write_where_they_are(self, groups: Sequence[Sequence[int]], write: PartWriter) -> list[str]:
        return self.rows.write_where_they_are(groups, ShapedPart(self.shape, write))


@dataclass(frozen=True)
class ShapedPart:
    """Writes a part's rows once ``shape`` made them the query's (:data:`~misa.io.spread.PartWriter`)."""

    shape: ArrowShape
    write: PartWriter

    def __call__(self, part: int, table: pa.Table) -> str:
        return self.write(part, self.shape(table))


def node_rows(table: pa.Table, columns: Sequence[tuple[str, str]], schema: pa.Schema) -> pa.Table:
    """The operator's rows as the stateful node's columns (``columns``: each one's kind and source column; no
    columns: no rows)."""
    if not table.num_columns:
        return schema.empty_table()
    return pa.table(
        [_column(table, kind, source, field.type) for (kind, source), field in zip(columns, schema)], schema=schema
    )


def _column(table: pa.Table, kind: str, source: str, dtype: pa.DataType) -> pa.Array:
    if kind == "window":
        start, end = (table[c].combine_chunks() for c in OUTPUT_WINDOW)
        return pa.StructArray.from_arrays([start, end], names=["start", "end"])
    if kind == "key text":
        return decode_keys(table[source], dtype)
    if kind == "pruned":  # an aggregate Spark's optimizer dropped: no step reads it
        return pa.nulls(table.num_rows, dtype)
    return table[source].combine_chunks()


def _step(rows: DataFrame, kind: str, items: list[str | Column]) -> DataFrame:
    """A select or a where, of SQL texts or Columns."""
    if kind == "where":
        return rows.where(items[0])
    return rows.select(*[F.expr(item) if isinstance(item, str) else item for item in items])
