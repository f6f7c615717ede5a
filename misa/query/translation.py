"""What :mod:`misa.query.translate` makes of a plan (:class:`Translation`), and the checks its parts share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column

from misa.exceptions import UnsupportedQueryError
from misa.query.plan import Attr, PlanNode


@dataclass(frozen=True)
class OutputColumn:
    """One column of the stateful node's output: its name and what it is in misa's output."""

    name: str
    kind: str  # "window" (the struct of window_start, window_end), "column" (misa's column ``source``)
    source: str = ""


@dataclass(frozen=True)
class JoinInput:
    """One side of a stream-stream join as misa's source reads it: the side's plan, the names of its columns in
    misa's rows (``l0``, ``l1``, ... or ``r0``, ...), and its equi-join keys (Columns over the side's plan)."""

    plan: PlanNode
    names: list[str]
    keys: list[Column]


@dataclass
class Translation:
    """How a query runs on misa: the source plan, the operator, its output and what runs above it."""

    source: PlanNode
    operator: Any
    output: list[OutputColumn]
    above: list[tuple[str, list[str | Column]]] = field(default_factory=list)  # ("select" | "where", SQL or Columns)
    join_inputs: list[JoinInput] = field(default_factory=list)  # a join's two sides (then ``source`` is the join)
    extra_columns: list[tuple[str, str]] = field(default_factory=list)  # (name, SQL) added to the source rows
    conditions: list[str] = field(default_factory=list)  # SQL filters Spark's windowing applies to the source
    warnings: list[str] = field(default_factory=list)
    stateful: str = ""  # the stateful node, as Spark prints it


def watermarks(node: PlanNode) -> list[PlanNode]:
    """The plan's ``EventTimeWatermark`` nodes."""
    found = [node] if node.kind == "EventTimeWatermark" else []
    for child in node.children:
        found += watermarks(child)
    return found


def watermark_of(source: PlanNode, stateful: PlanNode) -> Attr | None:
    """The event-time column ``withWatermark`` marked (with its delay), or None without a watermark."""
    marks = watermarks(source)
    if len(marks) > 1:
        raise refused(stateful, "its input has more than one withWatermark", "one withWatermark on the stream")
    return marks[0].fields["event_time"] if marks else None


def refuse_filters_on_event_time(stateful: PlanNode, source: PlanNode) -> None:
    """A filter on the event time between withWatermark and the stateful node: Spark's watermark counts the rows
    the filter drops, misa's sees only the rows that reach the operator."""
    marks = watermarks(stateful)
    if not marks:
        return
    event_time = marks[0].fields["event_time"].expr_id
    node = source
    while node.kind != "EventTimeWatermark" and node.children:
        condition = node.fields.get("condition") if node.kind == "Filter" else None
        if condition is not None and condition.kind != "IsNotNull":
            if any(e.attr is not None and e.attr.expr_id == event_time for e in condition.walk()):
                raise refused(
                    node,
                    "it filters on the event-time column after withWatermark (Spark's watermark counts the rows "
                    "it drops)",
                    "the same filter before withWatermark",
                )
        node = node.children[0]


def refused(node: PlanNode, why: str, instead: str) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"[MISA_UNSUPPORTED_QUERY] misa cannot run {node.describe()!r}: {why}. Write instead: {instead}."
    )
