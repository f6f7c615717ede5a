"""A stream-stream join's two sides as the one stream misa's join reads (:mod:`misa.operators.stream_join`): per row
its side, its keys and its row as a struct (the other side's row null)."""

from __future__ import annotations

from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.operators.schema import nullable
from misa.operators.stream_join import ROW_COLUMNS, SIDE
from misa.query.plan import PlanNode, attributes_of, column_of
from misa.query.translation import JoinInput


def join_rows(inputs: list[JoinInput], rows_of: Callable[[PlanNode], DataFrame]) -> DataFrame:
    """The join's two sides (each side's rows ``rows_of`` its plan) as one stream."""
    sides = [side_rows(rows_of(side.plan), side, index) for index, side in enumerate(inputs)]
    types = row_types(sides)
    return with_other_row(sides[0], 0, types).unionByName(with_other_row(sides[1], 1, types))


def side_rows(rows: DataFrame, side: JoinInput, index: int) -> DataFrame:
    """One side's ``rows`` (its plan's output: a stream's, or another stateful operation's output with the plan's own
    attributes, :class:`~misa.query.output.QueryOutput`) as its keys and its row, a struct of every field
    nullable."""
    keys = [key.alias(f"_k{i}") for i, key in enumerate(side.keys)]
    fields = [column_of(a).alias(name) for a, name in zip(attributes_of(side.plan), side.names)]
    row = F.struct(*fields)
    row_type = nullable(rows.select(row.alias("row")).schema["row"].dataType)
    return rows.select(*keys, row.cast(row_type).alias(ROW_COLUMNS[index]))


def row_types(sides: list[DataFrame]) -> tuple[T.DataType, T.DataType]:
    """The row types of the two sides' :func:`side_rows`."""
    return sides[0].schema[ROW_COLUMNS[0]].dataType, sides[1].schema[ROW_COLUMNS[1]].dataType


def with_other_row(rows: DataFrame, index: int, types: tuple[T.DataType, T.DataType]) -> DataFrame:
    """A side's :func:`side_rows` with its side number and the other side's row (null, of its type ``types``),
    the columns in the join's order: the side, the keys, the left row, the right row."""
    keys = [c for c in rows.columns if c != ROW_COLUMNS[index]]
    other = F.lit(None).cast(types[1 - index]).alias(ROW_COLUMNS[1 - index])
    row_columns = [F.col(ROW_COLUMNS[0]), other] if index == 0 else [other, F.col(ROW_COLUMNS[1])]
    return rows.select(F.lit(index).alias(SIDE), *keys, *row_columns)
