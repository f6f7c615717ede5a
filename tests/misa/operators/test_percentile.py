"""Exact percentiles over counts per value (misa.operators.percentile): the values Spark 4.3 returned for one group of
doubles 1.0, 2.0, -0.0, 0.0 and NaN (``SELECT median(v), percentile(v, 0.3), ... GROUP BY k``, run once and written
here), and the same counts merged in another order."""

from __future__ import annotations

import math

from misa.operators.mode import counts_of, merge_counts
from misa.operators.percentile import percentiles_of

VALUES = [1.0, 2.0, -0.0, 0.0, math.nan]


def test_the_counts_of_one_group_give_sparks_values():
    counts = counts_of(VALUES)
    assert percentiles_of("percentile", counts, (0.5,), False) == 1.0  # median(v)
    assert percentiles_of("percentile", counts, (0.3,), False) == 0.19999999999999996  # percentile(v, 0.3)
    assert percentiles_of("percentile", counts, (0.25, 0.75), True) == [0.0, 2.0]
    assert percentiles_of("percentile_desc", counts, (0.3,), False) == 1.8  # percentile_cont(0.3) ... DESC
    assert percentiles_of("percentile_disc", counts, (0.3,), False) == 0.0
    assert math.isnan(percentiles_of("percentile", counts, (1.0,), False))  # NaN sorts last
    assert percentiles_of("percentile", {}, (0.5,), False) is None  # a group without a non-null value


# (values, p, Spark 4.3's percentile(v, p) over them as doubles), measured: the rounding of its interpolation
SPARK_INTERPOLATIONS = (
    ([-3.0, 7.0], 0.3, 0.0),  # not 4.44e-16 (misa fuzz --from-query seed 157)
    ([0.1, 0.7], 0.35, 0.31),
    ([1.0, 3.0, 10.0], 0.37, 2.48),
    ([-1e16, 3.0], 0.9, -999999999999996.0),
    ([2.5, -7.25, 11.0, 0.3], 0.61, 2.1260000000000003),
    ([5.0, 5.1], 0.77, 5.077),
)


def test_the_interpolation_rounds_as_sparks():
    for values, p, spark in SPARK_INTERPOLATIONS:
        assert percentiles_of("percentile", counts_of(values), (p,), False) == spark, (values, p)


def test_counts_merged_in_any_order_give_the_same_percentiles():
    whole = counts_of([*VALUES, 7.0, 7.0, None])
    parts = merge_counts(
        counts_of([7.0, math.nan, None]), merge_counts(counts_of([2.0, 0.0]), counts_of([7.0, 1.0, -0.0]))
    )
    for function in ("percentile", "percentile_desc", "percentile_disc", "percentile_disc_desc"):
        for p in (0.0, 0.1, 0.3, 0.5, 0.9, 1.0):
            a, b = percentiles_of(function, whole, (p,), False), percentiles_of(function, parts, (p,), False)
            assert a == b or math.isnan(a) and math.isnan(b), (function, p, a, b)
