"""Which column Spark judges a stateful node's rows by, and the watermark misa's operator keeps for it.

Spark finds a stateful operator's event time in its input's attributes: the one that carries ``withWatermark``'s
delay in its metadata (``spark.watermarkDelayMs``; a rename keeps it), whatever its name
(``WatermarkSupport.findEventTimeColumn``); the rows at or before the watermark are late by that column, the
deduplication's too when it is not one of the keys. The watermark itself is the query's global one: with one
``withWatermark`` its latest event time minus the delay; over a ``union`` of streams that each have one,
``spark.sql.streaming.multipleWatermarkPolicy`` of the inputs' (:class:`~misa.operators.watermark.InputsWatermark`):
misa's source then tags each row with its branch of the union, so the operator knows each input's latest event time.
"""

from __future__ import annotations

from dataclasses import dataclass

from misa.operators.watermark import WatermarkInputs
from misa.query.plan import Attr, PlanNode, with_input_column
from misa.query.translation import refused, stateful_below, watermark_nodes, watermarks

INPUT = "_misa_input"  # the source column naming each row's branch of a union of watermarked streams
PASSES_COLUMNS = ("Project", "Filter", "SubqueryAlias")  # nodes between the stateful node and a union


@dataclass(frozen=True)
class Watermarked:
    """The watermark misa's operator keeps over ``source`` for an event-time column of it."""

    source: PlanNode  # the stateful node's input (a union's branches tagged, for ``inputs``)
    delay: str | None  # the column's withWatermark delay ("5000ms"); None: Spark judges no row by it
    inputs: WatermarkInputs | None = None  # a union of watermarked streams


def event_time_column(stateful: PlanNode, attrs: list[Attr]) -> Attr | None:
    """The attribute of ``attrs`` (the stateful node's input) that a withWatermark marked, as Spark finds it."""
    marked = {a.expr_id: a for a in attrs if a.watermark_delay_ms is not None}
    if len(marked) > 1:
        names = ", ".join(repr(a.name) for a in marked.values())
        raise refused(
            stateful,
            f"its input has several event-time columns ({names}; Spark fails such a query when it runs)",
            "one column marked by withWatermark in the stateful operation's input (drop or recompute the copies)",
        )
    return next(iter(marked.values()), None)


def watermarked(stateful: PlanNode, source: PlanNode, column: Attr | None, policy: str) -> Watermarked:
    """The watermark for the event-time ``column`` of the stateful node's input ``source`` (None: it has none);
    ``policy`` is spark.sql.streaming.multipleWatermarkPolicy."""
    if column is None or column.watermark_delay_ms is None:
        return Watermarked(source, None)
    delay = f"{column.watermark_delay_ms}ms"
    if stateful_below(source) is not None:  # a chain: the operation below gives the watermark (misa.query.chain)
        return Watermarked(source, delay)
    path = _union_path(source)
    marks = watermarks(source)
    if path is None or not watermarks(path[-1]):
        if len(marks) > 1:
            raise refused(stateful, "its input has more than one withWatermark", "one withWatermark on the stream")
        return Watermarked(source, delay)
    union = path[-1]
    if len(watermarks(union)) != len(marks):
        raise refused(
            stateful,
            "its input has a withWatermark both before and after a union",
            "withWatermark on each stream before the union, or one on the union",
        )
    position = next((i for i, a in enumerate(union.output) if a.expr_id == column.expr_id), None)
    if position is None:
        raise refused(
            stateful,
            f"its event time {column.name!r} is renamed or computed after the union of watermarked streams",
            "the union's own event-time column",
        )
    delays = tuple(_branch_delay(stateful, branch, position) for branch in union.children)
    inputs = WatermarkInputs(INPUT, delays, policy, watermark_nodes(union.children))
    return Watermarked(with_input_column(path, INPUT), delay, inputs)


def _union_path(source: PlanNode) -> list[PlanNode] | None:
    """The nodes from ``source`` down to a ``Union`` through projections and filters, or None if there is none."""
    path = [source]
    while path[-1].kind in PASSES_COLUMNS and len(path[-1].children) == 1:
        path.append(path[-1].children[0])
    return path if path[-1].kind == "Union" else None


def _branch_delay(stateful: PlanNode, branch: PlanNode, position: int) -> int | None:
    """A union branch's withWatermark delay (ms; None without one), which must mark the union's event time."""
    marks = watermarks(branch)
    if not marks:
        return None
    column = branch.output[position]
    if len(marks) > 1 or column.watermark_delay_ms is None:
        raise refused(
            stateful,
            f"a stream of its union has its withWatermark on another column than {column.name!r}, the union's "
            "event time",
            "withWatermark on the same column of each stream of the union",
        )
    return column.watermark_delay_ms
