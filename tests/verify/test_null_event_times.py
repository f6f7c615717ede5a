"""Rows without an event time under each operator that derives an expiry or a lateness from it, through
misa.from_query and through plain Spark, batch id by batch id (issue 63, item 7).

Spark judges a row late by ``t <= watermark`` and evicts state by the same predicate: for a null time both are null,
so such a row is never late and its state never evicted (a deduplication's key with its time, a join's stored row);
a window's or session window's analyzer filters it out (``isnotnull``); its watermark node reads a null time as 0.
dropDuplicatesWithinWatermark alone stores an expiry computed from it (0 + the delay):
tests/verify/test_spark_sources.py runs that one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from scenario_helpers import assert_sparks_rows

from tests.verify.test_spark_sources import files, rows
from verify.differential.scenarios import Builder, Round

ROUNDS = (
    Round(
        files=(
            ("in/0.json", rows((None, 1), (100, 1), (101, 2))),
            ("in/1.json", rows((None, 1), (None, 2), (130, 2), (131, 3))),
        )
    ),
    Round(files=(("in/2.json", rows((None, 1), (None, 3), (100, 1), (140, 3), (132, 4))),)),  # after a restart
)


def _watermarked(spark: SparkSession, inputs: Path) -> DataFrame:
    return files(spark, inputs / "in").withWatermark("t", "5 seconds")


def _self_join(spark: SparkSession, inputs: Path, how: str) -> DataFrame:
    left, right = _watermarked(spark, inputs).alias("a"), _watermarked(spark, inputs).alias("b")
    condition = "a.k = b.k AND b.t BETWEEN a.t - INTERVAL 10 SECONDS AND a.t"
    return left.join(right, F.expr(condition), how).select("a.k", "a.t", F.col("b.t").alias("bt"))


SHAPES: dict[str, tuple[Builder, str]] = {
    "dropDuplicates(['k', 't']): a key with a null time is kept for good": (
        lambda spark, inputs: _watermarked(spark, inputs).dropDuplicates(["k", "t"]),
        "append",
    ),
    "dropDuplicates(['k']), the watermark on t: a row without event time is never late": (
        lambda spark, inputs: _watermarked(spark, inputs).dropDuplicates(["k"]),
        "append",
    ),
    "a session window: rows without event time are filtered out": (
        lambda spark, inputs: _watermarked(spark, inputs).groupBy(F.session_window("t", "3 seconds"), "k").count(),
        "append",
    ),
    "an inner self-join within 10 s: a row without event time joins nothing": (
        lambda spark, inputs: _self_join(spark, inputs, "inner"),
        "append",
    ),
    "a left outer self-join: a left row without event time is never evicted, so never out unmatched": (
        lambda spark, inputs: _self_join(spark, inputs, "left_outer"),
        "append",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SHAPES))
def test_rows_without_event_time_give_sparks_rows(spark, tmp_path, name):
    build, mode = SHAPES[name]
    assert_sparks_rows(spark, name, build, mode, ROUNDS, tmp_path / "run")
