"""A filter on the event time after withWatermark, before a session window, a deduplication or a window under a
projection, through misa.from_query and through plain Spark, batch id by batch id (issue 63, item 6).

Spark's optimizer keeps the filter's conjuncts on the event time above its watermark node, which counts the rows they
drop, and pushes the others below it, whose rows then never count. The filter here, ``second(t) % 10 <> 0 AND
v <> 9``, drops x at 30 s (counted: Spark's watermark is 25 s after batch 1) and z at 91 s (not counted: it would
make it 86 s). Batch 2's p at 21 s is then late, and its q at 28 s is not; after the restart, q at 40 s is dropped
and counted again, t at 51 s dropped and not. Each was refused before ("it filters on the event-time column after
withWatermark").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from scenario_helpers import assert_sparks_rows

from tests.verify.test_query_shapes import event, stream
from verify.differential.scenarios import Builder, Round

KEEPS = "second(t) % 10 <> 0 AND v <> 9"  # on the event time (stays above withWatermark) and on v (pushed below)

ROUNDS = (
    Round(
        files=(
            ("a/0.json", (event("x", 1), event("y", 2), event("x", 3, 2))),
            ("a/1.json", (event("x", 30), event("z", 91, 9), event("w", 24), event("y", 22, 3))),
            ("a/2.json", (event("p", 21), event("q", 28), event("w", 26, 2), event("y", 27))),
        )
    ),
    Round(
        files=(
            ("a/3.json", (event("r", 23), event("q", 40), event("s", 33))),
            ("a/4.json", (event("s", 31), event("t", 51, 9), event("u", 44), event("q", 36))),
        )
    ),
)


def _filtered(spark: SparkSession, inputs: Path) -> DataFrame:
    """The stream watermarked 5 s behind its event time t, then filtered by :data:`KEEPS`."""
    return stream(spark, inputs).select("k", "t", "v").withWatermark("t", "5 seconds").where(KEEPS)


SHAPES: dict[str, tuple[Builder, str]] = {
    "dropDuplicatesWithinWatermark": (
        lambda spark, inputs: _filtered(spark, inputs).dropDuplicatesWithinWatermark(["k"]),
        "append",
    ),
    "session_window": (
        lambda spark, inputs: (
            _filtered(spark, inputs).groupBy(F.session_window("t", "3 seconds"), "k").agg(F.count("*"), F.sum("v"))
        ),
        "append",
    ),
    "dropDuplicates, the event time not a key": (
        lambda spark, inputs: _filtered(spark, inputs).dropDuplicates(["k"]),
        "append",
    ),
    "dropDuplicates with the event time, the filter's conjuncts in two wheres": (
        lambda spark, inputs: (
            stream(spark, inputs)
            .withWatermark("t", "5 seconds")
            .where("second(t) % 10 <> 0")
            .where("v <> 9")
            .dropDuplicates(["k", "t"])
        ),
        "update",
    ),
    "a window's count, the filter under a projection": (
        lambda spark, inputs: (
            _filtered(spark, inputs)
            .withColumn("w", F.col("v") * 2)
            .groupBy(F.window("t", "10 seconds"), "k")
            .agg(F.sum("w"))
        ),
        "append",
    ),
    "a session window, the filter on a renamed event time under a projection": (
        lambda spark, inputs: (
            stream(spark, inputs)
            .withWatermark("t", "5 seconds")
            .select(F.col("t").alias("my t"), "k", "v")
            .where("second(`my t`) % 10 <> 0 AND v <> 9")
            .withColumn("k", F.upper("k"))
            .groupBy(F.session_window("my t", "3 seconds"), "k")
            .count()
        ),
        "append",
    ),
}


@pytest.mark.slow  # 16 to 30 s each: make test builds the form through from_query (tests/verify/test_spark_queries.py)
@pytest.mark.parametrize("name", list(SHAPES))
def test_a_filter_on_the_event_time_after_withwatermark_gives_sparks_rows(spark, tmp_path, name):
    """The rows the filter drops count for the watermark exactly as Spark's watermark node counts them."""
    build, mode = SHAPES[name]
    assert_sparks_rows(spark, name, build, mode, ROUNDS, tmp_path / "run")
