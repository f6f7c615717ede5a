"""Chains of stateful operations (:mod:`misa.query.chain`) keyed by every type misa keys by its text (structs, nested
too, arrays, decimals, binary; :mod:`misa.query.key_text`) and by expressions, through misa.from_query and through
plain Spark, compared batch id by batch id (issue 63; ``misa fuzz --from-query`` seed 10307).

An operation above another reads the rows the one below emits, made afresh each batch: its keys' expressions (a key's
text, a computed key) must resolve on those rows. Seed 10307 (a count per ``array<double>`` key over a
``dropDuplicates`` without a watermark) failed each batch with Spark's ``MISSING_ATTRIBUTES`` error. The rows are
:mod:`tests.verify.test_key_type_queries`'s: keys Spark takes as equal though they differ, nulls, a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from misa import UnsupportedQueryError
from misa.query.job import planned
from tests.verify.test_key_type_queries import ROUNDS, key_stream, watermarked_keys
from verify.differential.catalog import count_rows
from verify.differential.scenarios import Builder, Round, Scenario, run_scenario

KEYS = ("st", "flat", "arr", "bn", "d")  # a nested struct (of arrays, decimals), a struct, an array, binary, a decimal
Shape = Callable[[str], Builder]  # a chain keyed by the named column
FIRST = (Round(files=ROUNDS[0].files[:1]),)  # the default suite's: one batch (the seed failed in its first)


def _keyed(rows: DataFrame) -> DataFrame:
    """``rows`` with ``flat``, a struct of a string and binary."""
    return rows.withColumn("flat", F.struct("k", "bn"))


def _joined(spark: SparkSession, inputs: Path, key: str) -> DataFrame:
    """The stream joined with itself on ``key`` within 5 s: the key, the right side's time and value."""
    left, right = _keyed(watermarked_keys(spark, inputs)).alias("a"), _keyed(watermarked_keys(spark, inputs)).alias("b")
    matched = left.join(right, F.expr(f"a.{key} = b.{key} AND b.t BETWEEN a.t - INTERVAL 5 SECONDS AND a.t"))
    return matched.select(F.col(f"a.{key}").alias(key), F.col("b.t").alias("bt"), F.col("b.v").alias("bv"))


def _windows(spark: SparkSession, inputs: Path, key: str) -> DataFrame:
    """A count per 10 s window and ``key`` (append below another operation)."""
    return (
        _keyed(watermarked_keys(spark, inputs)).groupBy(F.window("t", "10 seconds"), key).agg(F.count("*").alias("n"))
    )


# (the chain, Spark's output mode); the operations above read only columns of the keys below (no tie between rows)
SHAPES: dict[str, tuple[Shape, str]] = {
    "dropDuplicates, then a count per key (the seed's)": (
        lambda key: lambda s, i: _keyed(key_stream(s, i)).dropDuplicates([key, "k"]).groupBy(key).agg(F.count("k")),
        "update",
    ),
    "dropDuplicates with the event time, then a count per window and key": (
        lambda key: (
            lambda s, i: (
                _keyed(watermarked_keys(s, i))
                .dropDuplicates([key, "t"])
                .groupBy(F.window("t", "10 seconds"), key)
                .count()
            )
        ),
        "append",
    ),
    "dropDuplicatesWithinWatermark, then a count per key": (
        lambda key: (
            lambda s, i: _keyed(watermarked_keys(s, i)).dropDuplicatesWithinWatermark([key]).groupBy(key).count()
        ),
        "update",
    ),
    "a join, then a count per window of its right side's time and key": (
        lambda key: lambda s, i: _joined(s, i, key).groupBy(F.window("bt", "10 seconds"), key).count(),
        "append",
    ),
    "a join, then a count per key": (
        lambda key: lambda s, i: _joined(s, i, key).groupBy(key).agg(F.count("*").alias("n"), F.sum("bv")),
        "update",
    ),
    "windows, then windows of them": (
        lambda key: (
            lambda s, i: (
                _windows(s, i, key).groupBy(F.window(F.window_time("window"), "20 seconds"), key).agg(F.sum("n"))
            )
        ),
        "append",
    ),
    "windows, then dropDuplicates of the window and key": (
        lambda key: lambda s, i: _windows(s, i, key).dropDuplicates(["window", key]),
        "append",
    ),
    "a join, then dropDuplicates of its rows": (
        lambda key: lambda s, i: _joined(s, i, key).dropDuplicates([key, "bt", "bv"]),
        "append",
    ),
}


def _every_key(spark: SparkSession, inputs: Path) -> DataFrame:
    """dropDuplicates of every key type without a watermark, then a count per key of every type and a key computed
    from a struct's field (update): the seed's chain, its keys together."""
    deduplicated = _keyed(key_stream(spark, inputs)).dropDuplicates(["st", "flat", "arr", "bn", "d"])
    keys = [*KEYS, (F.col("st.a") % 2).alias("odd")]
    return deduplicated.groupBy(*keys).agg(F.count("*").alias("n"), F.max("bn").alias("most"))


def _assert_as_spark(
    spark: SparkSession, tmp_path: Path, name: str, build: Builder, mode: str, rounds: tuple[Round, ...]
):
    outcome = run_scenario(spark, Scenario(name, build, mode, rounds), tmp_path / "run")
    assert outcome.ok and outcome.spark_rows, f"{name}: {outcome}"


def test_a_count_per_key_of_every_type_over_a_deduplication(spark, tmp_path: Path):
    _assert_as_spark(spark, tmp_path, "every key type over dropDuplicates", _every_key, "update", FIRST)


@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_chains_keyed_by_every_type(spark, tmp_path: Path, shape: str, key: str):
    build, mode = SHAPES[shape]
    _assert_as_spark(spark, tmp_path, f"{shape} ({key})", build(key), mode, ROUNDS)


@pytest.mark.slow  # a guard: the refusal is the deduplication's alone (test_key_type_queries.py)
def test_a_map_key_in_a_chain_is_refused_at_start(spark, tmp_path: Path):
    """A map in a struct below another operation, as alone: Spark groups by no map, misa keys state by none."""
    (tmp_path / "a").mkdir()
    rows = watermarked_keys(spark, tmp_path).withColumn("m", F.struct(F.create_map("k", "v").alias("m")))
    query = rows.dropDuplicatesWithinWatermark(["m"]).groupBy(F.window("t", "10 seconds"), "k").count()
    with pytest.raises(UnsupportedQueryError, match="a map, which Spark does not group by"):
        planned(query, "append", lambda batch_id, table: None)


def test_apply_in_pandas_with_state_by_a_key_holding_floats_is_refused_at_start(spark, tmp_path):
    """Above a dropDuplicates as alone (the docs table's row): Spark keys applyInPandasWithState's state by the bits
    of a group's first key (a -0.0 and a 0.0 in different batches are two groups), which misa's key text cannot
    follow."""
    (tmp_path / "a").mkdir()
    rows = watermarked_keys(spark, tmp_path).dropDuplicates(["arr", "t"])
    query = rows.groupBy("arr").applyInPandasWithState(
        count_rows, "k array<double>, n long", "n long", "Update", GroupStateTimeout.NoTimeout
    )
    with pytest.raises(UnsupportedQueryError, match="it groups by arr array<double>, a key holding floating values"):
        planned(query, "update", lambda batch_id, table: None)
