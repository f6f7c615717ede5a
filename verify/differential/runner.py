"""One differential case through misa and through the same query in plain Spark, compared batch by batch.

Both engines read the case's files from one folder, one file per micro-batch, each round as an
``availableNow`` query (so a round's batches run back to back and the query restarts between rounds). Batches are
compared by Spark's batch id, batches without data included (misa runs them as Spark numbers them,
:mod:`misa.runtime.no_data_batches`): each batch's rows as multisets (floats up to summation order, NaN equal to
NaN, -0.0 to 0.0), its column names and Arrow types exactly, and the batch ids each engine ran.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from jobs.submit import native_aggregation, native_interval_join
from misa import Agg, Aggregation, IntervalJoin, MisaConfig, StatefulJob, from_query
from misa.exceptions import UnsupportedQueryError
from verify.differential.cases import Case
from verify.differential.group_state import SHAPES
from verify.differential.queries import expected_refusals, spark_api_query
from verify.differential.sketch_values import sketch_summary
from verify.output_diff import canonical, diff_rows

EVENT_TIME = "event_time"
_NONE = pa.table({})  # the output of a batch an engine did not run
FUNCTIONS = {"sum": F.sum, "count": F.count, "avg": F.avg, "min": F.min, "max": F.max}


@dataclass(frozen=True)
class Mismatch:
    """Where misa's output first differs from Spark's: the batch (or the run) and what differs."""

    batch: int | None
    what: str

    def __str__(self) -> str:
        where = f"batch {self.batch}" if self.batch is not None else "the run"
        return f"{where}: {self.what}"


def operator_of(case: Case) -> Aggregation | IntervalJoin:
    """misa's operator for the case's query."""
    q = case.query
    keys = list(q.keys)
    if q.operator == "join":
        return IntervalJoin(
            keys, EVENT_TIME, ["t", "v"], interval=f"{q.interval_s} seconds", watermark_delay=f"{q.delay_s}s"
        )
    aggs = [Agg(f"{f}_v", f, "v") for f in q.functions]
    if q.operator == "global":
        return Aggregation(keys, aggs)
    return Aggregation(
        keys,
        aggs,
        event_time=EVENT_TIME,
        window=f"{q.window_s} seconds",
        slide=f"{q.slide_s} seconds",
        watermark_delay=f"{q.delay_s}s",
        output_mode=q.output_mode,
    )


def upstream(rows: DataFrame) -> DataFrame:
    return rows.withColumn(EVENT_TIME, F.timestamp_millis("t"))


def spark_query(case: Case, events: DataFrame) -> DataFrame:
    """The plain-Spark query equal to the case's misa operator over the source's rows."""
    op = operator_of(case)
    if isinstance(op, IntervalJoin):
        return native_interval_join(op, upstream(events))
    if case.query.operator == "global":
        return events.groupBy(*op.group_by).agg(*[FUNCTIONS[a.function](a.column).alias(a.name) for a in op.aggs])
    return native_aggregation(op, upstream(events))


@dataclass(frozen=True)
class Refused:
    """The case's query refused at start: by Spark (and by misa with it), or by misa alone with
    :class:`~misa.exceptions.UnsupportedQueryError` (a form it names as one it does not run)."""

    by: str
    message: str

    def __str__(self) -> str:
        return f"refused by {self.by}: {self.message}"


def run_case(spark: SparkSession, case: Case, work: Path) -> Mismatch | Refused | None:
    """Run ``case`` through both engines under ``work`` (emptied first); the first mismatch, a refusal at start (a
    query Spark refuses must be refused by misa too), or None."""
    shutil.rmtree(work, ignore_errors=True)
    source = work / "input"
    source.mkdir(parents=True)
    conf = {"spark.sql.shuffle.partitions": "2", **_case_conf(case)}
    previous = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        if case.settings.from_query and expected_refusals(case.query):
            return _refused_at_start(spark, case, source, work / "misa")
        native: dict[int, pa.Table] = {}
        misa: dict[int, pa.Table] = {}
        written = 0
        for round_index, files in enumerate(case.rounds):
            for rows in files:
                _write_file(source, written, rows)
                written += 1
            try:
                native.update(_run_native(spark, case, source, work / "native"))
            except AnalysisException as error:
                if round_index or not is_query_refusal(error):  # a later round, or a missing source: not a refusal
                    raise
                return _refused_by_both(spark, case, source, work / "misa", error)
            try:
                misa.update(_run_misa(spark, case, source, work / "misa"))
            except UnsupportedQueryError as error:
                if round_index:
                    raise
                return Refused("misa", _first_line(error))
    except Exception as error:  # noqa: BLE001 - a failure in either engine is a finding, reported with the case
        return Mismatch(None, f"{type(error).__name__}: {_first_line(error)}")
    finally:
        for key, value in previous.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)
    return compare(native, misa)


def _refused_by_both(
    spark: SparkSession, case: Case, source: Path, run: Path, spark_error: Exception
) -> Mismatch | Refused:
    """Spark refused the case's query at start (``spark_error``): misa must refuse it at start too."""
    try:
        _run_misa(spark, case, source, run)
    except (AnalysisException, UnsupportedQueryError):
        return Refused("Spark", _first_line(spark_error))
    return Mismatch(None, f"Spark refused the query at start ({_first_line(spark_error)}), misa ran it")


def _refused_at_start(spark: SparkSession, case: Case, source: Path, run: Path) -> Mismatch | None:
    """A query misa refuses (queries.expected_refusals): from_query must refuse it at start, with one of its
    reasons' messages."""
    query = spark_api_query(case, _stream(spark, case, source))
    expected = expected_refusals(case.query)
    assert expected
    try:
        from_query(query, lambda batch_id, table: None, str(run / "ckpt"), output_mode=case.query.output_mode).close()
    except UnsupportedQueryError as error:
        named = any(reason in str(error) for reason in expected)
        return None if named else Mismatch(None, f"refused, but with none of {expected!r}: {error}")
    return Mismatch(None, f"misa took the query, which it refuses ({expected!r})")


def _case_conf(case: Case) -> dict[str, str]:
    """Spark settings a case runs with: an applyInPandasWithState case with processing-time timeouts runs without
    Spark's batches without data, which Spark runs after every batch for them (an ``availableNow`` round would never
    end; misa times them out in data batches only, docs/spark-queries.md)."""
    q = case.query
    if q.operator == "group_state" and SHAPES[q.functions[0]].timeout == GroupStateTimeout.ProcessingTimeTimeout:
        return {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}
    return {}


def compare(native: dict[int, pa.Table], misa: dict[int, pa.Table]) -> Mismatch | None:
    """The first batch whose rows or column types differ (a batch one engine did not run has none), else the batch
    ids run by one engine only (a batch without data, with no rows, run where the other ran none)."""
    for batch in sorted(set(native) | set(misa)):
        expected, got = native.get(batch, _NONE), misa.get(batch, _NONE)
        if expected.num_rows + got.num_rows == 0:
            continue
        if not expected.num_columns or not got.num_columns:
            missing = "misa" if not got.num_columns else "Spark"
            return Mismatch(batch, f"{missing} ran no batch {batch}; the other's rows: {(got or expected).to_pylist()}")
        if _types(expected) != _types(got):
            return Mismatch(batch, f"columns {_types(got)}, Spark's {_types(expected)}")
        diff = diff_rows(_rows(got), _rows(expected))
        if not diff.ok:
            return Mismatch(batch, diff.describe(expected.column_names))
    if sorted(native) != sorted(misa):
        return Mismatch(None, f"Spark ran batches {sorted(native)}, misa {sorted(misa)}")
    return None


def _types(table: pa.Table) -> list[tuple[str, str]]:
    return [(f.name, str(f.type)) for f in table.schema]


def _rows(table: pa.Table) -> Counter:
    """The rows as a multiset (columns by position: a join's may share names); a collect_set's (collect_union's)
    items sorted (Spark's order is its hash set's), a sketch as
    :func:`~verify.differential.sketch_values.sketch_summary` reads it."""
    columns = [c.to_pylist() for c in table.columns]
    for index, name in enumerate(table.column_names):
        if "sketch" in name:
            columns[index] = [sketch_summary(name, v) for v in columns[index]]
        if "collect_set" in name or "collect_union" in name:
            columns[index] = [
                sorted(v, key=lambda x: (x is None, str(x))) if isinstance(v, list) else v for v in columns[index]
            ]
    return Counter(tuple(_canonical(v) for v in row) for row in zip(*columns))


def _canonical(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):  # a struct (a window): NaN inside too
        return tuple((k, _canonical(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_canonical(v) for v in value)
    return canonical(value)


def _write_file(folder: Path, index: int, rows: tuple[dict[str, Any], ...]) -> None:
    """One input file; modification times increase with the index, as Spark orders new files."""
    path = folder / f"part-{index:05d}.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(path, (1_000_000 + index, 1_000_000 + index))


def _stream(spark: SparkSession, case: Case, source: Path) -> DataFrame:
    return spark.readStream.schema(case.schema()).option("maxFilesPerTrigger", 1).json(str(source))


def _run_native(spark: SparkSession, case: Case, source: Path, run: Path) -> dict[int, pa.Table]:
    """One round in plain Spark: every batch's output by batch id (batches without data included)."""
    outputs: dict[int, pa.Table] = {}
    build = spark_api_query if case.settings.from_query else spark_query
    query = build(case, _stream(spark, case, source))
    writer = query.writeStream.outputMode(case.query.output_mode).option("checkpointLocation", str(run / "ckpt"))
    writer.foreachBatch(lambda df, batch_id: outputs.__setitem__(batch_id, df.toArrow())).trigger(
        availableNow=True
    ).start().awaitTermination()
    return outputs


def _run_misa(spark: SparkSession, case: Case, source: Path, run: Path) -> dict[int, pa.Table]:
    """One round through misa (a new job over the same checkpoint, as a restarted driver): its batches' outputs by
    batch id."""
    outputs: dict[int, pa.Table] = {}
    config = MisaConfig.from_mapping(case.settings.conf())
    trigger = {"availableNow": True}
    if case.settings.from_query:
        query = spark_api_query(case, _stream(spark, case, source))
        job = from_query(
            query, outputs.__setitem__, str(run / "ckpt"), output_mode=case.query.output_mode, config=config, echo=None
        )
        try:
            job.start(trigger).awaitTermination()
        finally:
            job.close()
    else:
        plain = StatefulJob(
            operator_of(case), outputs.__setitem__, str(run / "ckpt"), upstream=upstream, config=config, echo=None
        )
        try:
            plain.start(spark, _stream(spark, case, source), trigger=trigger).awaitTermination()
        finally:
            plain.close(spark)
    return outputs


# Spark's analysis errors that name this machine's set-up, not the query: a run that meets one failed
MISSING_SOURCE_CONDITIONS = frozenset({"KAFKA_DATA_SOURCE_NOT_ENABLED"})


def is_query_refusal(error: BaseException) -> bool:
    """Whether Spark's ``error`` refuses the query itself (not a data source missing from the classpath, which
    refuses every query of that source and would hide the run's failure as refusals)."""
    condition = error.getCondition() if isinstance(error, AnalysisException) else None
    return condition not in MISSING_SOURCE_CONDITIONS and not any(
        f"[{c}]" in str(error) for c in MISSING_SOURCE_CONDITIONS
    )


def _first_line(error: BaseException) -> str:
    """The error's cause in one line: the innermost Python exception a streaming query's failure carries."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    causes = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return (causes[-1] if causes else lines[0] if lines else repr(error))[:300]
