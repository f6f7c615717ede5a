"""What :mod:`misa.query.translate` makes of a plan (:class:`Translation`), and the checks its parts share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.exceptions import UnsupportedQueryError
from misa.query.plan import PlanNode


@dataclass(frozen=True)
class OutputColumn:
    """One column of the stateful node's output: its name and what it is in misa's output."""

    name: str
    kind: str  # "window" (the struct of window_start, window_end), "column" (misa's column ``source``), "key text"
    # (misa's column ``source`` holds a key's text, misa.query.key_text: decoded to the node's type), "pruned" (an
    # aggregate Spark's optimizer drops, as nothing above reads it: nulls)
    source: str = ""


@dataclass(frozen=True)
class JoinInput:
    """One side of a stream-stream join as misa's source reads it: the side's plan, the names of its columns in
    misa's rows (``l0``, ``l1``, ... or ``r0``, ...), and its equi-join keys (Columns over the side's plan)."""

    plan: PlanNode
    names: list[str]
    keys: list[Column]


@dataclass(frozen=True)
class Projection:
    """The stateful node's output computed from the operator's columns ``columns`` (names and types) by SQL
    ``select``: an aggregation's expressions over its aggregates, as Spark computes them above its aggregation."""

    columns: T.StructType
    select: list[str]


@dataclass
class Translation:
    """How a query runs on misa: the source plan, the operator, its output and what runs above it."""

    source: PlanNode
    operator: Any
    output: list[OutputColumn]
    above: list[tuple[str, list[str | Column]]] = field(default_factory=list)  # ("select" | "where", SQL or Columns)
    join_inputs: list[JoinInput] = field(default_factory=list)  # a join's two sides (then ``source`` is the join)
    extra_columns: list[tuple[str, str | Column]] = field(default_factory=list)  # (name, SQL or Column) for the source
    conditions: list[str] = field(default_factory=list)  # SQL filters Spark's windowing applies to the source
    projection: Projection | None = None  # the node's output from the operator's columns, before ``above``
    picks: list[int] | None = None  # when ``above`` only selects columns: the node's columns it gives, in order
    warnings: list[str] = field(default_factory=list)
    stateful: str = ""  # the stateful node, as Spark prints it
    upstream: Translation | None = None  # a chain: the stateful operation below, whose output is this one's input
    chained_side: int | None = None  # a join above another stateful operation: the side that reads its output
    other_upstream: Translation | None = None  # such a join's other side's stateful operations (their top)
    node: PlanNode | None = None  # the stateful node
    own_attributes: bool = False  # ``above`` is of the plan's own expressions, run on the node's own attributes
    read_above: frozenset[int] | None = None  # the query's top node: the attributes its steps above read (ids)


STATEFUL = ("Aggregate", "Deduplicate", "DeduplicateWithinWatermark", "FlatMapGroupsInPandasWithState")


def is_stateful(node: PlanNode) -> bool:
    """Whether ``node`` is a stateful operation of a streaming query (a join of two streams among them)."""
    return node.kind in STATEFUL or node.kind == "Join" and all(reads_stream(c) for c in node.children)


def stateful_below(node: PlanNode) -> PlanNode | None:
    """The highest stateful node at or below ``node`` (None: none)."""
    if is_stateful(node):
        return node
    for child in node.children:
        found = stateful_below(child)
        if found is not None:
            return found
    return None


def reads_stream(node: PlanNode) -> bool:
    return node.kind.startswith("Streaming") or any(reads_stream(c) for c in node.children)


def watermarks(node: PlanNode) -> list[PlanNode]:
    """The plan's ``EventTimeWatermark`` nodes."""
    found = [node] if node.kind == "EventTimeWatermark" else []
    for child in node.children:
        found += watermarks(child)
    return found


def watermark_nodes(inputs: list[PlanNode]) -> tuple[int, ...]:
    """For each input (a union's branch, a join's side), the number of the ``withWatermark`` node its rows count
    for: inputs that read one node (one stream split by filters) share it, as Spark's watermark tracker does; an
    input with no node or several gets one of its own."""
    numbers: dict[int, int] = {}
    found = []
    for index, node in enumerate(inputs):
        marks = watermarks(node)
        key = marks[0].fields["node"] if len(marks) == 1 else ("input", index)
        found.append(numbers.setdefault(key, len(numbers)))
    return tuple(found)


def source_columns(rows: DataFrame, translation: Translation) -> DataFrame:
    """The operator's input of ``rows`` (the stateful node's input): the filters Spark's windowing applies, and the
    columns misa adds (computed keys, aggregates' arguments)."""
    for condition in translation.conditions:
        rows = rows.where(condition)
    for name, column in translation.extra_columns:
        rows = rows.withColumn(name, F.expr(column) if isinstance(column, str) else column)
    return rows


def refused(node: PlanNode, why: str, instead: str) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"[MISA_UNSUPPORTED_QUERY] misa cannot run {node.describe()!r}: {why}. Write instead: {instead}."
    )
