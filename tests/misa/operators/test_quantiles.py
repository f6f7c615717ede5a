"""misa's port of Spark's quantile sketch (misa/operators/quantiles.py): insert, compress, merge and query give the
samples worked out by hand from QuantileSummaries.scala, and the percentiles real Spark's percentile_approx gives over
one partition (one partial buffer per group) and over two (merged in one order or the other)."""

from __future__ import annotations

import math
import random

import pytest

from misa.operators.quantiles import Summary, digest_of, merge_digests, percentiles_of

PERCENTAGES = [0.0, 0.05, 0.1, 0.25, 0.33, 0.5, 0.66, 0.75, 0.9, 0.95, 1.0]


def test_a_partial_buffer_is_inserted_then_compressed_as_spark_does():
    """Relative error 0.25: inserted deltas floor(0.5 * count) but 0 at both ends; compress threshold 2.5 folds 4
    into 5 (1 + 1 + 0 < 2.5) and keeps the rest; the median's rank 3 falls on 2 (rank range [2, 3], target error 1)."""
    summary = digest_of([5.0, 1.0, 3.0, 2.0, 4.0], accuracy=4)
    assert summary.sampled == [(1.0, 1, 0), (2.0, 1, 1), (3.0, 1, 1), (5.0, 2, 0)]
    assert summary.count == 5 and summary.compressed
    assert percentiles_of(summary, [0.5, 0.1, 0.9]) == [2.0, 1.0, 5.0]


def test_merging_widens_the_samples_that_interleave_the_other_side():
    """floor(2 * 0.25 * 2) = 1 added to each sample past the other side's first; 1 and 3 stay exact."""
    merged = merge_digests(digest_of([2.0, 1.0], 4), digest_of([3.0, 1.5], 4))
    assert merged.sampled == [(1.0, 1, 0), (1.5, 1, 1), (2.0, 1, 1), (3.0, 1, 0)]
    assert merged.count == 4
    assert merge_digests(Summary.of_accuracy(4), digest_of([2.0], 4)).sampled == [(2.0, 1, 0)]
    assert percentiles_of(Summary.of_accuracy(4), [0.5]) is None  # no value: Spark's null


def test_below_half_the_accuracy_every_split_and_order_gives_the_exact_rank():
    """Below accuracy / 2 values every delta is 0 and nothing compresses: the value at rank ceil(p * n)."""
    rng = random.Random(5)
    for _ in range(40):
        accuracy = rng.choice((10, 40, 10_000))
        values = [float(rng.randint(-20, 20)) for _ in range(rng.randint(1, math.ceil(accuracy / 2) - 1))]
        cut = rng.randint(0, len(values))
        left, right = digest_of(values[:cut], accuracy), digest_of(values[cut:], accuracy)
        exact = sorted(values)
        expected = [
            exact[0]
            if p <= 1 / accuracy
            else exact[-1]
            if p >= 1 - 1 / accuracy
            else exact[math.ceil(p * len(values)) - 1]
            for p in PERCENTAGES
        ]
        assert percentiles_of(merge_digests(left, right), PERCENTAGES) == expected
        assert percentiles_of(merge_digests(right, left), PERCENTAGES) == expected


def _draws(seed: int, n: int, integers: bool) -> list[float]:
    rng = random.Random(seed)
    return [float(rng.randint(-50, 50)) if integers else rng.uniform(-10, 10) for _ in range(n)]


# group -> (accuracy, values): heavy compression (accuracy 5 and 10 over 1500 values), deltas without compression
# (accuracy 20 over 30 values), every sample exact (accuracy 10000), NaN and -0.0 among the doubles
GROUPS = {
    1: (5, _draws(1, 1500, True)),
    2: (10, _draws(2, 1500, False)),
    3: (20, _draws(7, 30, True)),
    4: (10_000, [3.0, -0.0, 0.0, math.nan, 1.0, -2.5, math.nan, 7.0]),
}


@pytest.fixture(scope="module")
def spark_percentiles(spark):
    """Spark's percentile_approx of each group at each accuracy, in one job over two partitions: every group's rows
    in the first (one partial buffer per group), but group 3's second half, in the second (two partials merged)."""
    from pyspark.sql import functions as F

    later = [(3, v) for v in GROUPS[3][1][15:]]
    rows = [(g, v) for g, (_, values) in GROUPS.items() for v in (values[:15] if g == 3 else values)]
    partitions = spark.sparkContext.parallelize(rows, 1).union(spark.sparkContext.parallelize(later, 1))
    aggregates = [F.percentile_approx("v", PERCENTAGES, a).alias(f"a{a}") for a in {a for a, _ in GROUPS.values()}]
    found = spark.createDataFrame(partitions, "g int, v double").groupBy("g").agg(*aggregates).collect()
    return {r["g"]: r.asDict() for r in found}


@pytest.mark.parametrize("group", [g for g in GROUPS if g != 3])
def test_one_partial_buffer_gives_sparks_percentiles(spark_percentiles, group):
    accuracy, values = GROUPS[group]
    got = percentiles_of(digest_of(values, accuracy), PERCENTAGES)
    expected = spark_percentiles[group][f"a{accuracy}"]
    assert [repr(x) for x in got] == [repr(x) for x in expected]  # NaN to NaN, -0.0 to -0.0


def test_two_partial_buffers_give_sparks_percentiles_merged_in_one_order_or_the_other(spark_percentiles):
    """30 values at accuracy 20: past accuracy / 2 the merged deltas depend on the split and on which buffer Spark
    merges first (its shuffle's order): here the two orders give other percentiles, and Spark's are one of them."""
    accuracy, values = GROUPS[3]
    first, second = digest_of(values[:15], accuracy), digest_of(values[15:], accuracy)
    empty = Summary.of_accuracy(accuracy)
    orders = [merge_digests(merge_digests(empty, a), b) for a, b in ((first, second), (second, first))]
    results = [percentiles_of(s, PERCENTAGES) for s in orders]
    assert results[0] != results[1]
    assert spark_percentiles[3][f"a{accuracy}"] in results
