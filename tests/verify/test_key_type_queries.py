"""Keys of every type Spark groups by (structs, nested too, arrays, decimals, binary) through misa.from_query and
through plain Spark, compared batch id by batch id (issue 63, item 4; each was refused before).

The rows hold keys Spark takes as equal though they differ (-0.0 and 0.0, NaN, inside structs and arrays; 1.5 and
1.50 as a decimal(10,2)), null keys, null fields and null elements, and keys seen again after a restart
(:func:`verify.differential.scenarios.run_scenario`); an aggregation's output must carry each key back with Spark's
exact type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from misa import UnsupportedQueryError
from misa.query.job import planned
from verify.differential.scenarios import Builder, Round, Scenario, run_scenario

SCHEMA = (
    "k string, t bigint, v bigint, d decimal(10,2), bn binary, arr array<double>, "
    "st struct<a: int, b: string, n: struct<x: double>, l: array<float>, d: decimal(6,3)>"
)
STRUCTS = (
    {"a": 1, "b": "p", "n": {"x": 0.0}, "l": [1.0, -0.0], "d": 1.5},
    {"a": 1, "b": "p", "n": {"x": -0.0}, "l": [1.0, 0.0], "d": 1.5},  # the key before, as Spark compares it
    {"a": 1, "b": "p", "n": None, "l": None, "d": None},
    {"a": None, "b": None, "n": None, "l": [None], "d": -2.25},
    None,
    {"a": 2, "b": "q", "n": {"x": float("nan")}, "l": [float("nan")], "d": 0.001},
    {"a": 2, "b": "q", "n": {"x": float("nan")}, "l": [], "d": 0.001},
)
DECIMALS = (1.5, 1.50, -0.0, None, 99999999.99, 0.01, 0.0)
BINARIES = ("AAE=", "", None, "/w==", "AAE=")  # base64, as Spark's JSON reader takes binary
ARRAYS = ([0.0], [-0.0], [float("nan")], [], None, [None, 1.5], [1.5, None])


def _rows(first: int, times: tuple[float, ...]) -> tuple[dict[str, Any], ...]:
    """Rows from ``first`` on, each key column cycling through its values at its own pace."""
    return tuple(
        {
            "k": ("a", "b", None)[(first + i) % 3],
            "t": int(t * 1000),
            "v": first + i,
            "d": DECIMALS[(first + i) % len(DECIMALS)],
            "bn": BINARIES[(first + 2 * i) % len(BINARIES)],
            "arr": ARRAYS[(first + 3 * i) % len(ARRAYS)],
            "st": STRUCTS[(first + i) % len(STRUCTS)],
        }
        for i, t in enumerate(times)
    )


ROUNDS = (
    Round(
        files=(
            ("a/0.json", _rows(0, (1, 2, 3, 4, 5, 6, 7))),
            ("a/1.json", _rows(3, (12, 13, 30, 31))),
            ("a/2.json", _rows(6, (3, 14, 32, 33, 34))),
        )
    ),
    Round(files=(("a/3.json", _rows(1, (5, 37, 44, 45, 46, 47, 48))),)),
)
SHORT = (Round(files=ROUNDS[0].files[:2]), ROUNDS[1])  # the default suite's: two batches, a restart, one more


def key_stream(spark: SparkSession, inputs: Path) -> DataFrame:
    rows = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(inputs / "a"))
    return rows.withColumn("t", F.timestamp_millis("t"))


def watermarked_keys(spark: SparkSession, inputs: Path) -> DataFrame:
    return key_stream(spark, inputs).withWatermark("t", "5 seconds")


def _joined(how: str, keys: str) -> Builder:
    """The stream joined with itself on ``keys`` (SQL of a.* and b.*) within 5 s."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        left, right = watermarked_keys(spark, inputs).alias("a"), watermarked_keys(spark, inputs).alias("b")
        condition = f"{keys} AND b.t BETWEEN a.t - INTERVAL 5 SECONDS AND a.t"
        return left.join(right, F.expr(condition), how)

    return build


def _groups(window: Callable[[], Column] | None, *keys: str | Callable[[], Column]) -> Builder:
    """An aggregation by ``window`` (None: no window) and ``keys`` (names, or Columns made when the query is)."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        rows = watermarked_keys(spark, inputs) if window is not None else key_stream(spark, inputs)
        columns = [key() if callable(key) else key for key in keys]
        group = [window(), *columns] if window is not None else columns
        return rows.groupBy(*group).agg(F.count("*").alias("n"), F.sum("v").alias("total"))

    return build


def _devices(spark: SparkSession, inputs: Path) -> DataFrame:
    """The stream with a struct column ``device`` made by withColumn (of a string, a nested struct and a decimal)."""
    return watermarked_keys(spark, inputs).withColumn("device", F.struct("k", F.col("st.n").alias("n"), "d"))


SHAPES: dict[str, tuple[Builder, str]] = {
    "groupBy('device'), a struct column made by withColumn, no window, complete": (
        lambda spark, inputs: _devices(spark, inputs).groupBy("device").agg(F.max("v")),
        "complete",
    ),
    "groupBy(window, 'device'), a struct column made by withColumn, update": (
        lambda spark, inputs: _devices(spark, inputs).groupBy(F.window("t", "10 seconds"), "device").count(),
        "update",
    ),
    "groupBy(st), a nested struct column, no window, update": (_groups(None, "st"), "update"),
    "groupBy(struct(k, d)), a tumbling window, append": (
        _groups(lambda: F.window("t", "10 seconds"), lambda: F.struct("k", "d").alias("kd")),
        "append",
    ),
    "groupBy(arr, bn), a sliding window, update": (
        _groups(lambda: F.window("t", "10 seconds", "5 seconds"), "arr", "bn"),
        "update",
    ),
    "groupBy(d, st.l), a session window, append": (
        _groups(lambda: F.session_window("t", "3 seconds"), "d", lambda: F.col("st.l")),
        "append",
    ),
    "dropDuplicates(['arr', 'd'])": (
        lambda spark, inputs: key_stream(spark, inputs).dropDuplicates(["arr", "d"]),
        "append",
    ),
    "dropDuplicates(['bn', 't']) with withWatermark": (
        lambda spark, inputs: watermarked_keys(spark, inputs).dropDuplicates(["bn", "t"]),
        "append",
    ),
    "dropDuplicatesWithinWatermark(['st', 'arr']), arrays and decimals in the struct": (
        lambda spark, inputs: watermarked_keys(spark, inputs).dropDuplicatesWithinWatermark(["st", "arr"]),
        "update",
    ),
    "inner join on a struct and a decimal": (_joined("inner", "a.st = b.st AND a.d = b.d"), "append"),
    "left outer join on an array": (_joined("left_outer", "a.arr = b.arr"), "append"),
    "right outer join on a decimal": (_joined("right_outer", "a.d = b.d"), "append"),
    "full outer join on struct(k, bn)": (_joined("full_outer", "struct(a.k, a.bn) = struct(b.k, b.bn)"), "append"),
    "left semi join on binary": (_joined("left_semi", "a.bn = b.bn"), "append"),
    # a key Spark infers no not-null filter for: its nulls match (Spark's join groups keys by their bytes)
    "inner join on concat(k, ''), null keys matching": (
        _joined("inner", "concat(a.k, '') = concat(b.k, '')"),
        "append",
    ),
    "left outer join on coalesce(k, bn), null keys matching": (
        _joined("left_outer", "coalesce(a.k, base64(a.bn)) = coalesce(b.k, base64(b.bn))"),
        "append",
    ),
}


def test_group_keys_of_every_type_give_sparks_rows_and_types(spark, tmp_path):
    """Struct (nested), decimal, binary and array keys of one aggregation, complete output: every key carried back
    with Spark's type each batch."""
    scenario = Scenario("every key type", _groups(None, "st", "d", "bn", "arr"), "complete", SHORT)
    outcome = run_scenario(spark, scenario, tmp_path / "run")
    assert outcome.ok and outcome.spark_rows, outcome


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SHAPES))
def test_keys_of_every_type_give_sparks_rows(spark, tmp_path, name):
    build, mode = SHAPES[name]
    outcome = run_scenario(spark, Scenario(name, build, mode, ROUNDS), tmp_path / "run")
    assert outcome.ok and outcome.spark_rows, outcome


MAPS: dict[str, Callable[[Column], Column]] = {  # a map, in a struct, in an array (Spark groups by no map)
    "a map": lambda m: m,
    "a map in a struct": lambda m: F.struct(m.alias("m")),
    "maps in an array": F.array,
}


@pytest.mark.parametrize("name", list(MAPS))
def test_map_keys_are_refused_at_start_as_spark_groups_by_no_map(spark, tmp_path, name):
    (tmp_path / "in" / "a").mkdir(parents=True)
    rows = watermarked_keys(spark, tmp_path / "in").withColumn("m", MAPS[name](F.create_map("k", "v")))
    query = rows.dropDuplicatesWithinWatermark(["m"])  # Spark refuses dropDuplicates of a map itself
    with pytest.raises(UnsupportedQueryError, match="a map, which Spark does not group by"):
        planned(query, "append", lambda batch_id, table: None)
