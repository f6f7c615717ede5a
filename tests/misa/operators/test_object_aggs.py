"""The aggregates kept as Python values per group: bounds, overflow and the sketch's error."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from misa.exceptions import AggregateOverflowError
from misa.operators.object_aggs import CollectLimitError, ObjectAgg, _estimate, _registers


def agg(function: str, value_type: pa.DataType = pa.int64(), output_type: pa.DataType | None = None) -> ObjectAgg:
    return ObjectAgg("a", function, 0, value_type, output_type or value_type)


def test_a_list_past_its_bound_fails_naming_the_setting_and_nothing_is_dropped():
    collect = agg("collect_list", pa.list_(pa.int64()))
    assert collect.merge([[1, 2], 2], [[3], 1], limit=3) == [[1, 2, 3], 3]
    with pytest.raises(CollectLimitError, match=r"spark.misa.aggregate.collectMaxItems"):
        collect.merge([[1, 2], 2], [[3, 4], 2], limit=3)
    assert agg("collect_set", pa.list_(pa.int64())).merge([[1, 2], 2], [[2, 1], 2], limit=2) == [[1, 2], 4]


def test_a_decimal_sum_past_its_precision_is_null_or_spark_s_ansi_error():
    total = agg("sum", pa.decimal128(4, 2))  # at most 99.99
    over = total.merge([Decimal("60.00"), 1], [Decimal("50.00"), 1], limit=10)
    assert total.result(total.merge([Decimal("1.25"), 1], [Decimal("2.50"), 1], 10), ansi=False) == Decimal("3.75")
    assert total.result(over, ansi=False) is None
    with pytest.raises(AggregateOverflowError, match="ARITHMETIC_OVERFLOW"):
        total.result(over, ansi=True)


def test_a_decimal_average_rounds_half_up_to_spark_s_scale():
    average = agg("avg", pa.decimal128(20, 2), pa.decimal128(14, 6))
    assert average.result([Decimal("2.00"), 3], ansi=False) == Decimal("0.666667")


@pytest.mark.parametrize("distinct", [1, 50, 400, 1_000, 2_000, 5_000, 200_000])
def test_the_sketch_is_exact_while_small_and_within_spark_s_error_beyond(distinct):
    hashes = np.random.default_rng(distinct).integers(-(2**63), 2**63 - 1, distinct, dtype=np.int64)
    half = _registers(hashes[: distinct // 2].tolist())
    merged = agg("approx_count_distinct").merge(half, _registers(hashes[distinct // 2 :].tolist()), limit=0)
    estimate = _estimate(merged)
    assert merged == _registers(hashes.tolist())  # merging sketches is the sketch of the union
    if distinct <= 50:
        assert estimate == distinct
    else:
        assert abs(estimate - distinct) <= 3 * 0.05 * distinct  # three of Spark's relative standard deviations
