"""A query with stateful operations one above the other, as misa's chain of operators (:mod:`misa.operators.chain`).

Spark runs such a query (``spark.sql.streaming.statefulOperator.allowMultiple``, true by default) when every
operation below another emits in append mode (its ``UnsupportedOperationChecker`` refuses the rest, and misa with
it). misa translates the plan from the top: the highest stateful node's operator reads, instead of a source, the
output of the operation below it, translated as a query of its own whose top is that node's input (the projections
and filters between the two run by Spark on each batch's output below, then what the operator above computes in its
source: its keys, its aggregates' arguments), and so on down to the lowest, which reads the query's source. Built,
any number one above another: below another, a deduplication (``dropDuplicates``, ``dropDuplicatesWithinWatermark``),
a time-window or session-window aggregation (append) or a stream-stream join (inner, outer or semi); above another, an
aggregation (with a time window, or none; over ``applyInPandasWithState``'s output with ``NoTimeout`` too), a
``dropDuplicates`` (over an aggregation's window Spark judges its rows by the window's end), ``applyInPandasWithState``,
a session window (over a deduplication, an inner join, or a time window's aggregation by window_time(window)), or a
stream-stream join with operations below it on one side (the other a stream, whose rows the job's source carries past
the operations below: :func:`misa.operators.chain.carried_source`) or on both (the other side's operations a chain of
their own, run on the carried rows); anything else is refused here, naming the pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from misa.exceptions import UnsupportedQueryError
from misa.operators.aggregation import Aggregation
from misa.operators.chain import Link, OperatorChain
from misa.operators.dedup import Deduplicate
from misa.operators.processor import StatefulProcessorOperator
from misa.operators.sessions import SessionAggregation
from misa.operators.stream_join import StreamJoin
from misa.query.join_rows import row_types, side_rows, with_other_row
from misa.query.output import QueryOutput
from misa.query.plan import PlanNode
from misa.query.translation import Translation, refused, source_columns, stateful_below

ALLOW_MULTIPLE = "spark.sql.streaming.statefulOperator.allowMultiple"
BUILT = "stateful operations one above another (any number), each below another a dropDuplicates, "
BUILT += "dropDuplicatesWithinWatermark, a time-window or session-window aggregation (append), a stream-stream "
BUILT += "join or applyInPandasWithState (NoTimeout, below an aggregation), each "
BUILT += "above another an aggregation (groupBy with a time window over an event time it passes on, or none), a "
BUILT += "dropDuplicates, applyInPandasWithState, a session window (over a deduplication, a time window or an "
BUILT += "inner join) or a stream-stream join with it on one side (one such join a chain)"


def upstream(
    node: PlanNode, translation: Translation, translate: Callable[[PlanNode], Translation], output_mode: str
) -> Translation:
    """The translation of the stateful operation below ``node`` (whose own ``translation`` is made, in the query's
    ``output_mode``), the query of its input translated by ``translate`` in append mode; a pair misa does not run is
    refused."""
    below = _below(node, translation)
    operator = translation.operator
    if not isinstance(operator, (Aggregation, SessionAggregation, Deduplicate, StatefulProcessorOperator, StreamJoin)):
        raise _refused(node, below, f"misa runs no {node.kind} over another stateful operation's output yet")
    if isinstance(operator, Aggregation) and operator.window and operator.watermark_delay is None:
        raise _refused(
            node,
            below,
            f"its window is over {operator.event_time!r}, which carries no watermark from the operation below (Spark's "
            "propagated watermark follows the event-time column: window_time(window), the window, or the column "
            "withWatermark marked)",
        )
    side = translation.chained_side
    lower = translate(translation.source if side is None else translation.join_inputs[side].plan)
    _check_pair(node, below, operator, lower, output_mode, side is not None)
    other = translation.join_inputs[1 - side].plan if side is not None else None
    other_below = stateful_below(other) if other is not None else None
    if other is not None and other_below is not None:  # both sides: the other's operations run as a chain of their own
        translation.other_upstream = translate(other)
        _check_pair(node, other_below, operator, translation.other_upstream, output_mode, True)
    return lower


def _check_pair(
    node: PlanNode, below: PlanNode, operator: Any, lower: Translation, output_mode: str, joined: bool
) -> None:
    """Refuses ``operator`` (of ``node``) over ``lower``'s output (of ``below``) where misa does not run the pair
    (``joined``: ``node`` is a join and ``lower`` one of its sides)."""
    if isinstance(lower.operator, Aggregation) and output_mode != "append":  # Spark's check was off
        raise _refused(
            node,
            below,
            f"Spark runs the aggregation below in {output_mode} output too, whose rows a stateful operation "
            "above may drop as late (spark.sql.streaming.statefulOperator.checkCorrectness.enabled=true refuses it)",
        )
    if isinstance(lower.operator, Aggregation) and not lower.operator.window and not lower.operator.time_keyed:
        why = "an aggregation without a time window or the event time among its keys emits no final rows"
        raise _refused(node, below, why)
    if isinstance(operator, SessionAggregation) and not isinstance(
        lower.operator, (Deduplicate, Aggregation, StreamJoin)
    ):
        why = "misa runs a session window over a deduplication's, a window's or a join's output only, yet"
        raise _refused(node, below, why)
    if joined and lower.operator.event_watermark() is None:
        why = "it has no watermark (Spark's join then reads the other side's); misa's join reads the one below's"
        raise _refused(node, below, why)
    if isinstance(lower.operator, StatefulProcessorOperator) and (
        not isinstance(operator, Aggregation) or lower.operator.time_mode != "None"
    ):
        why = "misa runs an aggregation over applyInPandasWithState's output (NoTimeout) only, yet"
        raise _refused(node, below, why)
    if not isinstance(
        lower.operator, (Aggregation, SessionAggregation, Deduplicate, StreamJoin, StatefulProcessorOperator)
    ):
        raise _refused(node, below, f"misa runs no stateful operation over a {below.kind}'s output yet")


def _below(node: PlanNode, translation: Translation) -> PlanNode:
    """The stateful node below ``node`` (a join's: below its left side if it has one, else its right, which
    ``translation`` then names)."""
    if not translation.join_inputs:
        below = stateful_below(translation.source)
        assert below is not None
        return below
    found = [(index, stateful_below(side.plan)) for index, side in enumerate(translation.join_inputs)]
    translation.chained_side, below = next((index, below) for index, below in found if below is not None)
    assert below is not None
    return below


def _refused(node: PlanNode, below: PlanNode, why: str) -> Exception:
    return refused(node, f"it reads the output of the stateful {below.describe()!r}: {why}", BUILT)


def chain_of(top: Translation) -> list[Translation]:
    """The translations of a query's stateful operations, the lowest (the one reading the source) first."""
    chain = [top]
    while chain[0].upstream is not None:
        chain.insert(0, chain[0].upstream)
    return chain


def parts_of(top: Translation) -> list[Translation]:
    """Every stateful operation's translation in a query: :func:`chain_of`, and a join's other side's too."""
    parts = []
    for part in chain_of(top):
        parts += [part, *(parts_of(part.other_upstream) if part.other_upstream else [])]
    return parts


@dataclass(frozen=True)
class Sources:
    """How a query's stream rows are read: the rows of a plan below the stateful nodes (``rows_of``), and those an
    operation reads (``source_of`` its translation: the lowest of a chain)."""

    rows_of: Callable[[PlanNode], DataFrame]
    source_of: Callable[[Translation], DataFrame]


def chained_operator(spark: SparkSession, top: Translation, sources: Sources) -> tuple[OperatorChain, DataFrame | None]:
    """The job's operator for a query of several stateful operations (``top``'s chain), and the rows the chain's
    source carries past its lowest operator (a join's other side: a stream's rows, or the source of its own
    operations; None: none)."""
    if spark.conf.get(ALLOW_MULTIPLE, "true").strip().lower() != "true":
        raise UnsupportedQueryError(
            f"[MISA_UNSUPPORTED_QUERY] misa cannot run {top.stateful!r} over another stateful operation's output with "
            f"{ALLOW_MULTIPLE}=false (Spark's single global watermark for every operator, before Spark 3.4). Write "
            f"instead: the query with {ALLOW_MULTIPLE}=true, Spark's default (its watermark propagated)."
        )
    chain = chain_of(top)
    links = []
    carried = None
    for lower, upper in zip(chain, chain[1:]):
        output = _output_of(spark, lower, upper)
        if upper.chained_side is None:
            feed = _feed(output, upper)
            links.append(Link(upper.operator, feed, feed(pa.table({})).schema))
            continue
        if carried is not None:
            raise _carried_twice(upper)
        link, carried = _join_link(spark, output, upper, sources)
        links.append(link)
    return OperatorChain(chain[0].operator, links), carried


def _output_of(spark: SparkSession, lower: Translation, upper: Translation) -> QueryOutput:
    """The output of ``lower``'s operation, which ``upper``'s reads by its columns' names."""
    assert lower.node is not None
    output = QueryOutput(spark, lower, lower.node, _no_sink)
    names = [f.name for f in output.frame(pa.table({})).schema.fields]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UnsupportedQueryError(
            f"[MISA_UNSUPPORTED_QUERY] misa cannot run {upper.stateful!r} over the output of {lower.stateful!r}: "
            f"it has several columns named {twice}. Write instead: a select of the columns under names of their "
            "own (F.col('a.t').alias('at'), ...) between the two."
        )
    return output


def _carried_twice(join: Translation) -> UnsupportedQueryError:
    return UnsupportedQueryError(
        f"[MISA_UNSUPPORTED_QUERY] misa cannot run {join.stateful!r}: a second stream-stream join above another "
        "stateful operation in one chain, each joining a stream of its own (misa's source carries one join's other "
        "side past the operations below). Write instead: one such join a query, the second query reading the first "
        "one's output."
    )


def _feed(below: QueryOutput, upper: Translation) -> Callable[[pa.Table], DataFrame]:
    """What turns the operator below's output of a batch into the input of ``upper``'s operator."""
    return lambda table: source_columns(below.frame(table), upper)


def _join_link(spark: SparkSession, below: QueryOutput, join: Translation, sources: Sources) -> tuple[Link, DataFrame]:
    """A join above another stateful operation (``below``'s output is its ``chained_side``), and the rows the chain's
    source carries for its other side: a stream's rows as the join reads them, or the source of the other side's
    own operations (:attr:`Translation.other_upstream`, run by the link as a chain of their own)."""
    side = join.chained_side
    assert side is not None
    other, inputs, empty = 1 - side, join.join_inputs, pa.table({})

    def own(table: pa.Table) -> DataFrame:
        return side_rows(below.frame(table), inputs[side], side)

    if join.other_upstream is None:
        others = side_rows(sources.rows_of(inputs[other].plan), inputs[other], other)
        types = row_types([own(empty), others][:: 1 if side == 0 else -1])
        feed = _with_other_row(own, side, types)
        return Link(join.operator, feed, feed(empty).schema, carries=True), with_other_row(others, other, types)
    top = join.other_upstream
    chain, carried = chained_operator(spark, top, sources) if top.upstream else (OperatorChain(top.operator, []), None)
    if carried is not None:
        raise _carried_twice(top)
    output = _output_of(spark, top, join)

    def theirs(table: pa.Table) -> DataFrame:
        return side_rows(output.frame(table), inputs[other], other)

    types = row_types([own(empty), theirs(empty)][:: 1 if side == 0 else -1])
    feed = _with_other_row(own, side, types)
    link = Link(join.operator, feed, feed(empty).schema, True, chain, _with_other_row(theirs, other, types))
    return link, sources.source_of(chain_of(top)[0])


def _with_other_row(
    rows: Callable[[pa.Table], DataFrame], side: int, types: tuple[T.DataType, T.DataType]
) -> Callable[[pa.Table], DataFrame]:
    return lambda table: with_other_row(rows(table), side, types)


def _no_sink(batch_id: int, table: pa.Table) -> None:
    raise AssertionError("an operation below another in a chain has no sink: its output is the next one's input")
