"""``misa.from_query``: a Spark user's streaming DataFrame, as written, run with its stateful part on misa.

::

    counts = (events.withWatermark("event_time", "10 seconds")
              .groupBy(F.window("event_time", "10 seconds"), "user").agg(F.count("*").alias("n")))
    job = misa.from_query(counts, sink, checkpoint_location="/data/ckpt", output_mode="update")
    job.start(trigger={"processingTime": "3 seconds"}).awaitTermination(); job.close()

Spark checks the query first as it would at ``writeStream.start()`` (an output mode it does not allow
fails with Spark's own message); :mod:`misa.query.translate` then splits the analyzed plan: the source runs
in Spark, the stateful node on misa (:class:`misa.job.StatefulJob`, with every option it takes), and the
steps above it on each batch's output (:mod:`misa.query.output`).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable, Sequence

from pyspark.sql import DataFrame, GroupedData, SparkSession
from pyspark.sql import types as T
from pyspark.sql.streaming import StatefulProcessor, StreamingQuery

from misa.config import MisaConfig
from misa.exceptions import UnsupportedQueryError
from misa.job import StatefulJob
from misa.operators.aggregation import Aggregation
from misa.operators.chain import carried_source
from misa.operators.dedup import Deduplicate
from misa.operators.processor import StatefulProcessorOperator
from misa.operators.sessions import SessionAggregation
from misa.operators.stream_join import StreamJoin
from misa.query.chain import Sources, chain_of, chained_operator, parts_of
from misa.query.join_rows import join_rows
from misa.query.joins import without_pruned_event_times
from misa.query.output import QueryOutput
from misa.query.plan import PlanNode, dataframe_of, read_plan
from misa.query.pushdown import Pushdown
from misa.query.translate import stateful_node, translate
from misa.query.translation import Translation, source_columns, watermarks
from misa.runtime.batch_loop import Sink

log = logging.getLogger(__name__)
OUTPUT_MODES = ("append", "update", "complete")


class _SparkQueryJob:
    """A misa job over a streaming DataFrame of a Spark session: :meth:`start` it as ``writeStream`` would."""

    spark: SparkSession
    source: DataFrame
    job: StatefulJob

    def start(self, trigger: dict[str, Any] | None = None) -> StreamingQuery:
        """Start the query (``trigger`` as ``DataStreamWriter.trigger`` takes it; Spark's default without)."""
        return self.job.start(self.spark, self.source, trigger=trigger)

    def close(self) -> None:
        """Stop the query if it runs and release misa's state (commits finish first)."""
        self.job.close(self.spark)


class QueryJob(_SparkQueryJob):
    """A streaming query whose stateful operation runs on misa (what :func:`from_query` returns)."""

    def __init__(
        self, query: DataFrame, sink: Sink, checkpoint_location: str, *, output_mode: str = "append", **options: Any
    ):
        self.spark: SparkSession = query.sparkSession
        options = _with_config(self.spark, options)
        self.translation, self.source, output = planned(query, output_mode, sink, options["config"].collect_max_items)
        self.job = StatefulJob(self.translation.operator, output, checkpoint_location, **options)


def _with_config(spark: SparkSession, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with ``config``: the one given, else the ``spark.misa.*`` settings of ``spark``'s session."""
    config = options.get("config")
    return {**options, "config": config if config is not None else MisaConfig.from_session(spark)}


def planned(
    query: DataFrame, output_mode: str, sink: Sink, collect_max_items: int = 10_000
) -> tuple[Translation, DataFrame, QueryOutput]:
    """Everything :func:`from_query` checks and builds before a job exists: Spark's own checks, the translation,
    the operator resolved against its source rows, the steps above it compiled; refusals raise here."""
    if output_mode not in OUTPUT_MODES:
        raise ValueError(f"output_mode {output_mode!r}: use one of {', '.join(OUTPUT_MODES)} (Spark's)")
    if not query.isStreaming:
        raise UnsupportedQueryError(
            "[MISA_UNSUPPORTED_QUERY] from_query takes a streaming DataFrame (spark.readStream...); this one "
            "is a batch DataFrame: run it in Spark"
        )
    spark = query.sparkSession
    pushdown = Pushdown(spark, read_plan(query))
    plan = pushdown.plan
    _spark_accepts(spark, plan, output_mode)
    policy = spark.conf.get("spark.sql.streaming.multipleWatermarkPolicy", "min") or "min"
    translation = translate(plan, output_mode, collect_max_items, policy.lower())
    for warning in translation.warnings:
        log.warning(warning)
    for part in parts_of(translation):
        _without_pruned_event_time(part, pushdown)
        _without_pruned_aggregates(part, pushdown)
        if isinstance(part.operator, StreamJoin) and part.node is not None:
            part.operator = without_pruned_event_times(part.operator, part.node, pushdown.inputs_of("Join"))
    source = _source_rows(spark, chain_of(translation)[0], pushdown)
    if translation.upstream is not None:  # several stateful operations, the job runs them as one
        sources = Sources(_rows_of(spark, pushdown), lambda part: _source_rows(spark, part, pushdown))
        translation.operator, carried = chained_operator(spark, translation, sources)
        source = source if carried is None else carried_source(source, carried)
    translation.operator.signature(source.schema)  # columns and types, before anything starts
    return translation, source, QueryOutput(spark, translation, stateful_node(plan), sink)


class ProcessorJob(_SparkQueryJob):
    """A Spark StatefulProcessor over a stream's groups, its state in misa (what
    :func:`transform_with_state_in_pandas` returns)."""

    def __init__(
        self,
        stream: DataFrame,
        group_by: Sequence[str],
        processor: StatefulProcessor,
        output_schema: T.StructType | str,
        time_mode: str,
        sink: Sink,
        checkpoint_location: str,
        initial_state: DataFrame | GroupedData | None = None,
        **options: Any,
    ):
        self.spark, self.source = stream.sparkSession, stream
        options = _with_config(self.spark, options)
        event_time, delay = None, None
        if time_mode == "EventTime":
            marks = watermarks(read_plan(stream))
            if len(marks) != 1:
                raise UnsupportedQueryError(
                    "[MISA_UNSUPPORTED_QUERY] EventTime mode needs one withWatermark on the stream (found "
                    f"{len(marks)}): stream.withWatermark(event_time, delay) before transform_with_state_in_pandas"
                )
            event_time = marks[0].fields["event_time"].name
            delay = f"{marks[0].fields['event_time'].watermark_delay_ms}ms"
        if isinstance(initial_state, GroupedData):
            initial_state = initial_state._df
        operator = StatefulProcessorOperator(
            processor, list(group_by), output_schema, time_mode, event_time, delay, initial_state=initial_state
        )
        self.job = StatefulJob(operator, sink, checkpoint_location, **options)


def from_query(
    query: DataFrame, sink: Sink, checkpoint_location: str, *, output_mode: str = "append", **options: Any
) -> QueryJob:
    """misa's job for a streaming ``query`` written in Spark's DataFrame API (one stateful operation: an
    aggregation, with or without a time window, or a deduplication); ``sink(batch_id, pyarrow.Table)`` gets each
    batch's output rows as plain Spark's ``writeStream`` in ``output_mode`` would write them. ``options`` are
    :class:`~misa.job.StatefulJob`'s (``config``, ``state_dir``, ``dfs_url``, ``echo``, ...); without ``config``, the
    query's session's ``spark.misa.*`` settings apply. A plan misa cannot run fails here with
    :class:`~misa.exceptions.UnsupportedQueryError` naming the node."""
    return QueryJob(query, sink, checkpoint_location, output_mode=output_mode, **options)


def transform_with_state_in_pandas(
    stream: DataFrame,
    group_by: Sequence[str],
    processor: StatefulProcessor,
    output_schema: T.StructType | str,
    output_mode: str,
    time_mode: str,
    sink: Sink,
    checkpoint_location: str,
    initial_state: DataFrame | GroupedData | None = None,
    **options: Any,
) -> ProcessorJob:
    """``stream.groupBy(*group_by).transformWithStateInPandas(processor, output_schema, output_mode, time_mode)``
    with the processor's state in misa; ``sink(batch_id, pyarrow.Table)`` gets the rows it yields. ``output_mode``
    (Append or Update) is Spark's contract with the sink and changes nothing here; ``time_mode`` is None,
    ProcessingTime or EventTime (the stream's withWatermark gives the event time). ``options`` are
    :class:`~misa.job.StatefulJob`'s (without ``config``, the stream's session's ``spark.misa.*`` settings apply).
    ``initial_state`` (a DataFrame with the grouping columns, or Spark's ``df.groupBy(...)``) goes to
    ``handleInitialState`` once per key in the query's first batch."""
    if output_mode.lower() not in ("append", "update"):
        raise ValueError(f"output_mode {output_mode!r}: transformWithStateInPandas takes Append or Update")
    return ProcessorJob(
        stream, group_by, processor, output_schema, time_mode, sink, checkpoint_location, initial_state, **options
    )


def _without_pruned_event_time(translation: Translation, pushdown: Pushdown) -> None:
    """A deduplication whose event time is not among its keys judges no row late when Spark's optimizer prunes that
    column below it (nothing above reads it: ``dropDuplicates(["k", "v"]).groupBy("k")``); misa's then neither."""
    operator, node = translation.operator, translation.node
    if not isinstance(operator, Deduplicate) or not operator.event_time or operator.event_time_key or node is None:
        return
    if operator.within_watermark or operator.watermark_inputs is not None:
        return
    marked = [a.expr_id for a in node.output if a.watermark_delay_ms is not None]
    keys = {k.expr_id for k in node.fields["keys"]}
    kept = [ids for ids in pushdown.outputs_of(node.kind) if keys <= ids]
    if marked and kept and all(marked[0] not in ids for ids in kept):
        translation.operator = replace(operator, event_time=None, watermark_delay=None)


def _without_pruned_aggregates(translation: Translation, pushdown: Pushdown) -> None:
    """The aggregates Spark's optimizer drops because no step above the query's aggregation reads them
    (``agg(first(v), min_by(v, o, 3))`` then a select of the first alone): misa computes them neither, and their
    columns come out null, read by no step (one a step reads is kept, whatever the optimizer made of it). A batch's
    aggregation then has Spark's functions, so Spark's plan: a sort-based one (for ``min_by`` with ``k``) reorders a
    key's rows, which first and last follow (fuzz seed 70722)."""
    operator, node, read = translation.operator, translation.node, translation.read_above
    if not isinstance(operator, (Aggregation, SessionAggregation)) or node is None or read is None:
        return
    if translation.projection is not None or len(translation.output) != len(node.output):
        return  # expressions over aggregates: misa's columns are not the node's outputs
    names = {agg.name for agg in operator.aggs} - set(operator.group_by)
    aggregates = {i for i, c in enumerate(translation.output) if c.kind == "column" and c.source in names}
    ids = {node.output[i].expr_id for i in aggregates}
    kept = [found for found in pushdown.outputs_of("Aggregate") if found & ids]
    if len(kept) != 1:
        return
    dropped = {i for i in aggregates if node.output[i].expr_id not in kept[0] | read}
    pruned = {translation.output[i].source for i in dropped}
    if not pruned or len(pruned) == len(operator.aggs):  # an aggregation of no aggregates: misa keeps them all
        return
    translation.operator = replace(operator, aggs=[agg for agg in operator.aggs if agg.name not in pruned])
    translation.output = [replace(c, kind="pruned") if i in dropped else c for i, c in enumerate(translation.output)]


def _spark_accepts(spark: SparkSession, plan: PlanNode, output_mode: str) -> None:
    """Spark's own checks of a streaming query for ``output_mode`` (its AnalysisException if it refuses)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    mode = getattr(jvm.org.apache.spark.sql.streaming.OutputMode, output_mode.capitalize())()
    checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
    checker.checkForStreaming(plan.jvm, mode)
    checker.checkStreamingQueryGlobalWatermarkLimit(plan.jvm, mode)  # stateful operations one above another


def _source_rows(spark: SparkSession, translation: Translation, pushdown: Pushdown) -> DataFrame:
    """The stream of rows the operator reads: the plan below the stateful node, as Spark runs it in the query
    (with the filters Spark's optimizer moves below its watermarks from above that node)."""
    if translation.join_inputs:
        return join_rows(translation.join_inputs, _rows_of(spark, pushdown))
    return source_columns(dataframe_of(spark, pushdown.source(translation.source)), translation)


def _rows_of(spark: SparkSession, pushdown: Pushdown) -> Callable[[PlanNode], DataFrame]:
    """The rows of a plan below the stateful nodes, as Spark runs it in the query (with the filters its optimizer
    moves below the watermarks)."""
    return lambda plan: dataframe_of(spark, pushdown.source(plan))
