"""Query shapes Spark runs, through misa.from_query and through plain Spark, compared batch id by batch id (issue 44).

Each scenario writes small JSON files under its own folders, one file per batch of each source (``availableNow``
with ``maxFilesPerTrigger`` 1, so a round's batches run back to back), and restarts the query between rounds
(:func:`verify.differential.scenarios.run_scenario`). The rows are chosen so that each case turns on what it names:
a row late only by the newest watermark, a key seen before a restart, an input with no rows yet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from misa.query.job import planned
from verify.differential.scenarios import Builder, Round, Scenario, run_scenario

SCHEMA = "k string, k2 bigint, t bigint, v bigint, s string, st struct<a: int, b: string, n: struct<x: double>>"
POLICY = "spark.sql.streaming.multipleWatermarkPolicy"


def event(k: str | None, t: float, v: int = 1, **fields: Any) -> dict[str, Any]:
    """One input row: key ``k``, event time ``t`` in seconds, value ``v``, and any other field of :data:`SCHEMA`."""
    return {"k": k, "t": int(t * 1000), "v": v, **fields}


def stream(spark: SparkSession, inputs: Path, folder: str = "a") -> DataFrame:
    """The JSON files of ``inputs/folder``, one per batch, the event time ``t`` a timestamp."""
    rows = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inputs / folder))
    return rows.withColumn("t", F.timestamp_millis("t"))


def assert_same_as_spark(spark: SparkSession, tmp_path: Path, scenario: Scenario) -> None:
    outcome = run_scenario(spark, scenario, tmp_path / "run")
    assert outcome.ok, f"{scenario.name}: {outcome}"


# ------------------------------------------------------------------------------------ finding 6 and its cause
# Spark's deduplication drops every row at or before the watermark by the event-time column of its input (the one
# withWatermark marked), a key or not; misa judged rows only when the event time was a key. After batch 1 (30 s) the
# watermark is 25 s: batch 2's rows at 3 s are judged by batch 1's late-events watermark (0) and count, batch 3's at
# 4 s by 25 s and are dropped; after the restart the watermark is Spark's commit log's.
LATE_ONLY = (
    Round(
        files=(
            ("a/0.json", (event("x", 1, k2=1), event("y", 2, k2=2))),
            ("a/1.json", (event("x", 30, k2=1), event("z", 31, k2=3))),
            ("a/2.json", (event("p", 3, k2=7), event("q", 3, k2=8))),
            ("a/3.json", (event("r", 4, k2=9), event("s", 4, k2=10), event("x", 4, k2=1))),
        )
    ),
    Round(files=(("a/4.json", (event("u", 6, k2=11), event("v", 40, k2=12), event("p", 41, k2=7))),)),
)


@pytest.mark.slow  # the suite's time
def test_drop_duplicates_of_a_renamed_column_drops_rows_late_by_a_watermark_on_another_column(spark, tmp_path):
    """Finding 6: dropDuplicates(['k2', 'my k']), 'my k' renamed, the watermark on t."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        renamed = stream(spark, inputs).withColumnRenamed("k", "my k")
        return renamed.withWatermark("t", "5 seconds").dropDuplicates(["k2", "my k"])

    assert_same_as_spark(spark, tmp_path, Scenario("finding 6", build, "append", LATE_ONLY))


def _renamed_time(spark: SparkSession, inputs: Path) -> DataFrame:
    """The stream watermarked on t, then t renamed 'my t' and k 'my k' (a rename keeps the watermark's mark)."""
    watermarked = stream(spark, inputs).withWatermark("t", "5 seconds")
    return watermarked.select(F.col("t").alias("my t"), F.col("k").alias("my k"), "k2", "v")


def _joined_on_keys_with_a_space(spark: SparkSession, inputs: Path) -> DataFrame:
    left, right = _renamed_time(spark, inputs).alias("a"), _renamed_time(spark, inputs).alias("b")
    condition = "a.`my k` = b.`my k` AND b.`my t` BETWEEN a.`my t` - INTERVAL 5 SECONDS AND a.`my t`"
    return left.join(right, F.expr(condition)).select("a.my k", "a.my t", F.col("b.v").alias("bv"))


RENAMED: dict[str, tuple[Builder, str]] = {
    "dropDuplicates by a renamed event time": (
        lambda spark, inputs: _renamed_time(spark, inputs).dropDuplicates(["my k", "my t"]),
        "append",
    ),
    "dropDuplicatesWithinWatermark of a renamed event time, a key with a space": (
        lambda spark, inputs: _renamed_time(spark, inputs).dropDuplicatesWithinWatermark(["my k"]),
        "append",
    ),
    "a window over a renamed event time, grouped by a key with a space": (
        lambda spark, inputs: _renamed_time(spark, inputs).groupBy(F.window("my t", "10 seconds"), "my k").count(),
        "append",
    ),
    "a session window over a renamed event time, keyed by a column with a space": (
        lambda spark, inputs: (
            _renamed_time(spark, inputs).groupBy(F.session_window("my t", "3 seconds"), "my k").agg(F.sum("v"))
        ),
        "append",
    ),
    "a stream-stream join on keys with a space, over a renamed event time": (_joined_on_keys_with_a_space, "append"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RENAMED))
def test_a_renamed_event_time_and_columns_with_spaces_give_sparks_rows(spark, tmp_path, name):
    """What shares finding 6's cause: misa found the event time by the withWatermark node's own column, Spark by the
    mark it leaves on the column, which a rename keeps (the first four were wrong or refused before)."""
    build, mode = RENAMED[name]
    assert_same_as_spark(spark, tmp_path, Scenario(name, build, mode, LATE_ONLY))


@pytest.mark.slow
def test_a_filter_on_a_renamed_event_time_before_a_deduplication_gives_sparks_rows(spark, tmp_path):
    """Spark's watermark counts the rows such a filter drops (it stays above withWatermark, renamed or not), and so
    does misa's, which is Spark's (refused before; tests/verify/test_event_time_filters.py has more)."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        later = F.lit("1970-01-01 00:00:05").cast("timestamp")
        return _renamed_time(spark, inputs).where(F.col("my t") > later).dropDuplicatesWithinWatermark(["my k"])

    assert_same_as_spark(spark, tmp_path, Scenario("a renamed time filtered", build, "append", LATE_ONLY))


def _counted_per_key(spark: SparkSession, inputs: Path, filtered: bool) -> DataFrame:
    """A count per key without a window over a watermarked stream (filtered on the event time, or not)."""
    rows = stream(spark, inputs).withWatermark("t", "10 seconds")
    rows = rows.where(F.col("t") > F.lit("1970-01-01 00:00:02").cast("timestamp")) if filtered else rows
    return rows.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


@pytest.mark.parametrize(
    "filtered", [pytest.param(f, marks=pytest.mark.slow) for f in (False, True)], ids=["plain", "filtered"]
)
def test_an_aggregation_without_a_window_runs_sparks_batches_without_data(spark, tmp_path, filtered):
    """Spark's aggregation evicts by the query's watermark with or without an event time among its keys, so it runs
    a batch without data whenever the watermark moves (misa fuzz --from-query seeds 30053, 30576, 30579: misa ran
    none since it judged that by the keys)."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        return _counted_per_key(spark, inputs, filtered)

    assert_same_as_spark(spark, tmp_path, Scenario("a count per key", build, "update", LATE_ONLY))


# LATE_ONLY with a row without an event time in the first batch (a group Spark never closes) and a second row at an
# instant already seen (t = 30 s)
INSTANTS = (
    Round(files=((("a/0.json", (*LATE_ONLY[0].files[0][1], {"k": "n", "t": None, "v": 5})),) + LATE_ONLY[0].files[1:])),
    Round(files=(("a/4.json", (*LATE_ONLY[1].files[0][1], event("x", 30, k2=1))),)),
)


@pytest.mark.slow  # the suite's time: make test runs the operator's instants (tests/misa/operators/test_spark_forms.py)
@pytest.mark.parametrize("mode", ["update", "append", "complete"])
def test_an_aggregation_by_the_event_time_itself_gives_sparks_rows(spark, tmp_path, mode):
    """groupBy(k, t) over t's withWatermark: Spark drops rows at or before the watermark and evicts (append: emits)
    the groups whose t is at or before it; a null t is a group it never closes (refused at start before: "it groups
    by the event-time column without a window")."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        rows = stream(spark, inputs).withWatermark("t", "10 seconds")
        return rows.groupBy("k", "t").agg(F.count("*").alias("n"), F.sum("v").alias("s"))

    assert_same_as_spark(spark, tmp_path, Scenario(f"by the event time, {mode}", build, mode, INSTANTS))


def _binary_literals(spark: SparkSession, inputs: Path) -> DataFrame:
    """A filter and an aggregate's delimiter of binary literals (the plan reader failed on them before)."""
    rows = stream(spark, inputs).withWatermark("t", "10 seconds").withColumn("b", F.col("k").cast("binary"))
    kept = rows.where(F.col("b") != F.lit(bytearray(b"p")))
    return kept.groupBy(F.window("t", "10 seconds")).agg(F.expr("listagg(b, X'2c') WITHIN GROUP (ORDER BY b)"))


def test_a_query_with_binary_literals_is_planned(spark, tmp_path):
    (tmp_path / "a").mkdir()
    translation, _, _ = planned(_binary_literals(spark, tmp_path), "update", lambda batch_id, table: None)
    assert translation.operator is not None


@pytest.mark.slow  # the suite's time (the planning above is in make test)
def test_a_query_with_binary_literals_gives_sparks_rows(spark, tmp_path):
    assert_same_as_spark(spark, tmp_path, Scenario("binary literals", _binary_literals, "update", LATE_ONLY))


# ------------------------------------------------------------------------------------ keys Spark computes
STRUCTS = (
    {"a": 1, "b": "p", "n": {"x": 0.0}},
    {"a": 1, "b": "p", "n": {"x": -0.0}},  # the same key as the one before, as Spark compares it
    {"a": 1, "b": "p", "n": None},
    {"a": None, "b": None, "n": None},
    None,
    {"a": 2, "b": "q", "n": {"x": float("nan")}},
)


def _keyed_rows(first: int, times: tuple[float, ...]) -> tuple[dict[str, Any], ...]:
    return tuple(
        event(
            ("a", "B", None)[(first + i) % 3],
            t,
            first + i,
            k2=(first + i) % 5,
            s=("x", "X", "y", None)[(first + i) % 4],
            st=STRUCTS[(first + i) % len(STRUCTS)],
        )
        for i, t in enumerate(times)
    )


KEYED = (
    Round(
        files=(
            ("a/0.json", _keyed_rows(0, (1, 2, 3, 4, 5, 6))),
            ("a/1.json", _keyed_rows(2, (12, 13, 30, 31))),
            ("a/2.json", _keyed_rows(5, (3, 14, 32, 33))),
            ("a/3.json", _keyed_rows(7, (4, 21, 34, 35, 36))),
        )
    ),
    Round(files=(("a/4.json", _keyed_rows(1, (5, 37, 44, 45, 46, 47))),)),
)


def _watermarked(spark: SparkSession, inputs: Path) -> DataFrame:
    return stream(spark, inputs).withWatermark("t", "5 seconds")


KEY_SHAPES: dict[str, tuple[Builder, str]] = {
    "groupBy(upper(s)), no window": (
        lambda spark, inputs: stream(spark, inputs).groupBy(F.upper("s")).agg(F.count("*"), F.sum("v")),
        "update",
    ),
    "groupBy(window, (k2 % 2).alias('p'))": (
        lambda spark, inputs: (
            _watermarked(spark, inputs).groupBy(F.window("t", "10 seconds"), (F.col("k2") % 2).alias("p")).count()
        ),
        "append",
    ),
    "groupBy(sliding window, length(s), k)": (
        lambda spark, inputs: (
            _watermarked(spark, inputs).groupBy(F.window("t", "10 seconds", "5 seconds"), F.length("s"), "k").count()
        ),
        "update",
    ),
    "groupBy(st.a), a struct's field, complete output": (
        lambda spark, inputs: stream(spark, inputs).groupBy(F.col("st.a")).agg(F.max("v")),
        "complete",
    ),
    "groupBy(session_window, lower(k))": (
        lambda spark, inputs: (
            _watermarked(spark, inputs).groupBy(F.session_window("t", "3 seconds"), F.lower("k")).agg(F.sum("v"))
        ),
        "append",
    ),
    "dropDuplicates() of every column, a nested struct among them": (
        lambda spark, inputs: stream(spark, inputs).select("k", "st").dropDuplicates(),
        "append",
    ),
    "dropDuplicates(['st', 't']) with withWatermark": (
        lambda spark, inputs: _watermarked(spark, inputs).dropDuplicates(["st", "t"]),
        "append",
    ),
    "dropDuplicatesWithinWatermark(['st'])": (
        lambda spark, inputs: _watermarked(spark, inputs).dropDuplicatesWithinWatermark(["st"]),
        "update",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(KEY_SHAPES))
def test_keys_spark_computes_give_sparks_rows(spark, tmp_path, name):
    """Group keys that are expressions or a struct's field, struct columns among a deduplication's keys (each was
    refused before)."""
    build, mode = KEY_SHAPES[name]
    assert_same_as_spark(spark, tmp_path, Scenario(name, build, mode, KEYED))


# ------------------------------------------------------------------------------------ a union of watermarked streams
# Folder a is watermarked 5 s behind, b 10 s. Spark's global watermark is the minimum (or maximum) of the inputs',
# an input without rows since the query (re)started counting as 0, and never goes back; after a restart it is the
# one the commit log kept. Round 1: b has no rows, the minimum stays 0. Round 2: 40 s (a's 45 s). Round 3: a alone,
# b's 65 s forgotten: it stays 40 s. Round 4: 60 s, and b's 44 s still counts in [40, 50).
UNION = (
    Round(files=(("a/0.json", (event("x", 11), event("y", 12))), ("a/1.json", (event("x", 30), event("y", 31))))),
    Round(
        files=(
            ("a/2.json", (event("x", 12), event("z", 27), event("y", 45))),
            ("b/0.json", (event("x", 12), event("y", 21), event("x", 65))),
        )
    ),
    Round(files=(("a/3.json", (event("x", 60), event("y", 47))),)),
    Round(files=(("b/1.json", (event("x", 70), event("z", 44))), ("a/4.json", (event("y", 80),)))),
)


def _union(spark: SparkSession, inputs: Path, b_watermark: bool = True) -> DataFrame:
    """Folder a watermarked 5 s behind, unioned with folder b watermarked 10 s behind (or not at all)."""
    b = stream(spark, inputs, "b").select("k", "t", "v")
    b = b.withWatermark("t", "10 seconds") if b_watermark else b
    return stream(spark, inputs, "a").select("k", "t", "v").withWatermark("t", "5 seconds").union(b)


@pytest.mark.slow  # make test runs a union below one withWatermark in test_one_stream_split.py
def test_a_windowed_count_of_a_union_of_watermarked_streams_gives_sparks_rows(spark, tmp_path):
    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        return _union(spark, inputs).groupBy(F.window("t", "10 seconds"), "k").count()

    assert_same_as_spark(spark, tmp_path, Scenario("union, window", build, "append", UNION))


UNION_SHAPES: dict[str, tuple[Builder, str, str]] = {
    "a window, the maximum policy": (
        lambda spark, inputs: _union(spark, inputs).groupBy(F.window("t", "10 seconds"), "k").count(),
        "update",
        "max",
    ),
    "a sliding window, one stream without withWatermark": (
        lambda spark, inputs: (
            _union(spark, inputs, b_watermark=False).groupBy(F.window("t", "10 seconds", "5 seconds")).agg(F.sum("v"))
        ),
        "append",
        "min",
    ),
    "a session window": (
        lambda spark, inputs: _union(spark, inputs).groupBy(F.session_window("t", "4 seconds"), "k").count(),
        "append",
        "min",
    ),
    "dropDuplicates, the event time not a key": (
        lambda spark, inputs: _union(spark, inputs).dropDuplicates(["k", "v"]),
        "append",
        "min",
    ),
    "dropDuplicatesWithinWatermark, the maximum policy": (
        lambda spark, inputs: _union(spark, inputs).dropDuplicatesWithinWatermark(["k"]),
        "append",
        "max",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(UNION_SHAPES))
def test_a_union_of_watermarked_streams_gives_sparks_rows(spark, tmp_path, name):
    build, mode, policy = UNION_SHAPES[name]
    assert_same_as_spark(spark, tmp_path, Scenario(name, build, mode, UNION, session_conf={POLICY: policy}))


# ------------------------------------------------------------------------------------ selections above the node
# Steps above the stateful node that only select columns (renamed, reordered, repeated, some dropped, in one select
# or several) run in Arrow (``Translation.picks``); any other step runs in Spark. Both must give Spark's rows, names
# and types.
def _watermarked_dedup(spark: SparkSession, inputs: Path) -> DataFrame:
    return _watermarked(spark, inputs).dropDuplicatesWithinWatermark(["k"])


SELECTIONS: dict[str, tuple[Builder, str, bool]] = {
    "dedup, then columns reordered, renamed, repeated and dropped over two selects": (
        lambda spark, inputs: (
            _watermarked_dedup(spark, inputs)
            .select(F.col("v").alias("value"), "k", F.col("st").alias("nested"), F.col("k").alias("again"), "t")
            .select("again", "value", "nested", F.col("t").alias("time"))
        ),
        "append",
        True,
    ),
    "a window's count, its window and key renamed": (
        lambda spark, inputs: (
            _watermarked(spark, inputs)
            .groupBy(F.window("t", "10 seconds"), "k")
            .count()
            .select(F.col("count").alias("n"), F.col("window").alias("w"), "k")
        ),
        "update",
        True,
    ),
    "a self-join with a residual condition (a where misa adds), then its columns (runs in Spark)": (
        lambda spark, inputs: (
            _watermarked(spark, inputs)
            .alias("a")
            .join(
                _watermarked(spark, inputs).alias("b"),
                F.expr("a.k = b.k AND a.t BETWEEN b.t - INTERVAL 5 SECONDS AND b.t AND a.v < b.v"),
            )
            .select("a.k", F.col("a.v").alias("av"), F.col("b.v").alias("bv"))
        ),
        "append",
        False,
    ),
    "dedup, then a computed column (runs in Spark)": (
        lambda spark, inputs: _watermarked_dedup(spark, inputs).select("k", (F.col("v") * 2).alias("twice")),
        "append",
        False,
    ),
    "dedup, then a filter and a select (runs in Spark)": (
        lambda spark, inputs: _watermarked_dedup(spark, inputs).where("v > 3").select("k", "v"),
        "append",
        False,
    ),
}


@pytest.mark.parametrize("name", list(SELECTIONS))
def test_selections_above_the_stateful_node_are_picked_in_arrow_only_when_they_only_select(spark, tmp_path, name):
    build, _, picked = SELECTIONS[name]
    (tmp_path / "in" / "a").mkdir(parents=True)
    translation, _, _ = planned(build(spark, tmp_path / "in"), SELECTIONS[name][1], lambda batch_id, table: None)
    assert (translation.picks is not None) == picked, translation.picks


@pytest.mark.slow  # the suite's time: make test checks the selections on the plan (the test above)
@pytest.mark.parametrize("name", list(SELECTIONS))
def test_selections_above_the_stateful_node_give_sparks_rows_and_types(spark, tmp_path, name):
    build, mode, _ = SELECTIONS[name]
    assert_same_as_spark(spark, tmp_path, Scenario(name, build, mode, KEYED))
