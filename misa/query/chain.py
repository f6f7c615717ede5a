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
stream-stream join with the operation below on one side (the other a stream, whose rows the job's source carries
past the operations below: :func:`misa.operators.chain.carried_source`); anything else is refused here, naming the
pair.
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

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
BUILT += "inner join) or a stream-stream join with it on one side, a stream on the other"


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
    if side is not None and lower.operator.event_watermark() is None:
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
    return lower


def _below(node: PlanNode, translation: Translation) -> PlanNode:
    """The stateful node below ``node`` (a join's: below the one side that has one, which ``translation`` then
    names; both sides, refused)."""
    if not translation.join_inputs:
        below = stateful_below(translation.source)
        assert below is not None
        return below
    found = [(index, stateful_below(side.plan)) for index, side in enumerate(translation.join_inputs)]
    chained = [(index, below) for index, below in found if below is not None]
    if len(chained) > 1:
        why = "both its sides read a stateful operation's output; misa runs a join above one, the other a stream"
        raise _refused(node, chained[1][1], why)
    translation.chained_side, below = chained[0]
    return below


def _refused(node: PlanNode, below: PlanNode, why: str) -> Exception:
    return refused(node, f"it reads the output of the stateful {below.describe()!r}: {why}", BUILT)


def chain_of(top: Translation) -> list[Translation]:
    """The translations of a query's stateful operations, the lowest (the one reading the source) first."""
    chain = [top]
    while chain[0].upstream is not None:
        chain.insert(0, chain[0].upstream)
    return chain


def chained_operator(
    spark: SparkSession, top: Translation, rows_of: Callable[[PlanNode], DataFrame]
) -> tuple[OperatorChain, DataFrame | None]:
    """The job's operator for a query of several stateful operations (``top``'s chain), and the rows the chain's
    source carries past its lowest operator (a join's other side, a stream read by ``rows_of`` its plan; None:
    none)."""
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
        assert lower.node is not None
        output = QueryOutput(spark, lower, lower.node, _no_sink)
        names = [f.name for f in output.frame(pa.table({})).schema.fields]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:  # the operation above reads its columns by name
            raise UnsupportedQueryError(
                f"[MISA_UNSUPPORTED_QUERY] misa cannot run {upper.stateful!r} over the output of {lower.stateful!r}: "
                f"it has several columns named {twice}. Write instead: a select of the columns under names of their "
                "own (F.col('a.t').alias('at'), ...) between the two."
            )
        if upper.chained_side is None:
            feed = _feed(output, upper)
        elif carried is None:
            feed, carried = _join_feed(output, upper, upper.chained_side, rows_of)
        else:
            raise UnsupportedQueryError(
                f"[MISA_UNSUPPORTED_QUERY] misa cannot run {upper.stateful!r}: a second stream-stream join above "
                "another stateful operation in one chain, each joining a stream of its own (misa's source carries one "
                "join's other side past the operations below). Write instead: one such join a query, the second query "
                "reading the first one's output."
            )
        links.append(Link(upper.operator, feed, feed(pa.table({})).schema, carries=upper.chained_side is not None))
    return OperatorChain(chain[0].operator, links), carried


def _feed(below: QueryOutput, upper: Translation) -> Callable[[pa.Table], DataFrame]:
    """What turns the operator below's output of a batch into the input of ``upper``'s operator."""
    return lambda table: source_columns(below.frame(table), upper)


def _join_feed(
    below: QueryOutput, join: Translation, side: int, rows_of: Callable[[PlanNode], DataFrame]
) -> tuple[Callable[[pa.Table], DataFrame], DataFrame]:
    """For a join above another stateful operation: what turns the operator below's output into the rows of the
    join's ``side`` (the one reading it), and the rows of the join's other side (a stream, ``rows_of`` its plan),
    which the chain's source carries to the join (:mod:`misa.operators.chain`)."""
    other = 1 - side

    def own(table: pa.Table) -> DataFrame:
        return side_rows(below.frame(table), join.join_inputs[side], side)

    others = side_rows(rows_of(join.join_inputs[other].plan), join.join_inputs[other], other)
    types = row_types([own(pa.table({})), others] if side == 0 else [others, own(pa.table({}))])
    return (lambda table: with_other_row(own(table), side, types)), with_other_row(others, other, types)


def _no_sink(batch_id: int, table: pa.Table) -> None:
    raise AssertionError("an operation below another in a chain has no sink: its output is the next one's input")
