"""misa's port of Spark's NumericHistogram (misa.operators.histogram) gives Spark's histogram_numeric of the same
values read in the same order (one partition): ties between equally close bins broken by Spark's random numbers,
-0.0, NaN, every input type's centres."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from misa.operators.histogram import JavaRandom, histogram_merge, histogram_of, histogram_result

VALUES = {
    "ties": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 2.0, 2.0],
    "zeros and NaN": [0.0, -0.0, 1.0, float("nan"), 3.0, float("nan"), -2.0, 0.5],
    "random": [float(random.Random(7).randint(-50, 50)) for _ in range(200)],
}


def test_java_random_gives_javas_numbers():
    generator = JavaRandom(42)  # new java.util.Random(42).nextDouble(), twice
    assert [generator.next_double(), generator.next_double()] == [0.7275636800328681, 0.6832234717598454]


@pytest.mark.parametrize("bins", [3, 40, *(pytest.param(b, marks=pytest.mark.slow) for b in (2, 5))])  # suite time
@pytest.mark.parametrize("name", list(VALUES))
def test_a_buffer_built_from_rows_is_sparks(spark, name, bins):
    rows = spark.createDataFrame([(v,) for v in VALUES[name]], "v double").coalesce(1)
    expected = rows.agg(F.histogram_numeric("v", F.lit(bins)).alias("h")).collect()[0]["h"]
    got = histogram_result(histogram_of(VALUES[name], bins), pa.float64())
    assert got == [{"x": b["x"], "y": b["y"]} for b in expected] or _same_with_nan(got, expected)


def test_centres_keep_the_input_type_as_spark_converts_them(spark):
    rows = spark.createDataFrame([(v,) for v in (1, 2, 4, 7, 8)], "v int").coalesce(1)
    expected = rows.agg(F.histogram_numeric("v", F.lit(2)).alias("h")).collect()[0]["h"]
    got = histogram_result(histogram_of([1.0, 2.0, 4.0, 7.0, 8.0], 2), pa.int32())
    assert got == [{"x": b["x"], "y": b["y"]} for b in expected]


def test_a_merge_keeps_equal_centres_apart_until_a_trim():
    assert histogram_merge([[5.0, 1.0]], [[5.0, 2.0]], 10) == [[5.0, 1.0], [5.0, 2.0]]
    assert histogram_merge([[5.0, 1.0], [9.0, 1.0]], [[5.0, 2.0]], 2) == [[5.0, 3.0], [9.0, 1.0]]
    assert histogram_merge([], [[1.0, 1.0]], 2) == [[1.0, 1.0]]


def _same_with_nan(got, expected) -> bool:
    """Equal where NaN centres count as equal."""
    pairs = zip(got or [], expected or [])
    return len(got or []) == len(expected or []) and all(
        (a["x"] == b["x"] or a["x"] != a["x"] and b["x"] != b["x"]) and a["y"] == b["y"] for a, b in pairs
    )
