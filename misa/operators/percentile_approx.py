"""``percentile_approx(col, percentage[, accuracy])`` (``approx_percentile``) over misa's states: the Spark-side
partial, the state, the result, as Spark's ``ApproximatePercentile`` gives them.

Spark converts each value to a double (dates: days, timestamps: microseconds, decimals and numbers: their double)
and inserts it into its digest (:mod:`misa.operators.quantiles`); a batch's partial here is the list of a group's
doubles, built into one digest on the driver as one task's partial buffer, which is merged into the stored digest
(the stored one first, as Spark's state restore gives them). The result is each percentage's sample converted back
to the input's type (an array for an array of percentages), null when the group has no non-null value.

A state is ``(relative_error, count, samples)`` of a compressed digest: the fields Spark serializes.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Sequence

import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.operators.quantiles import Summary, digest_of, merge_digests, percentiles_of

DEFAULT_ACCURACY = 10_000  # ApproximatePercentile.DEFAULT_PERCENTILE_ACCURACY
NUMBERS = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)
PERCENTILE_TYPES = (*NUMBERS, T.DateType, T.TimestampType)  # Spark's but for timestamp_ntz and intervals
State = tuple[float, int, list[tuple[float, int, int]]]


@dataclass(frozen=True)
class Percentiles:
    """percentile_approx's constants: the percentages, whether Spark returns an array (``percentage`` was an array),
    the accuracy (relative error ``1 / accuracy``)."""

    percentages: tuple[float, ...]
    array: bool = False
    accuracy: int = DEFAULT_ACCURACY

    def __post_init__(self) -> None:
        if not 0 < self.accuracy <= 2**31 - 1:
            raise ValueError(f"percentile_approx: accuracy {self.accuracy} is not in (0, {2**31 - 1}]")
        if any(not 0.0 <= p <= 1.0 for p in self.percentages) or len(self.percentages) != 1 and not self.array:
            raise ValueError(f"percentile_approx: percentages {self.percentages} are not in [0, 1]")

    def __str__(self) -> str:
        shown = f"[{', '.join(map(str, self.percentages))}]" if self.array else str(self.percentages[0])
        return f"{shown}, {self.accuracy}"


def percentile_partial(column: Column, dtype: T.DataType, percentiles: Percentiles) -> list[Column]:
    """A group's partial: its values as the doubles Spark inserts, then a typed null of the result type."""
    result = T.ArrayType(dtype, containsNull=False) if percentiles.array else dtype
    return [F.collect_list(as_doubles(column, dtype)), F.lit(None).cast(result)]


def as_doubles(column: Column, dtype: T.DataType) -> Column:
    """``column``'s values as the doubles Spark's sketches and histograms take: a date's days, a timestamp's
    microseconds, a number's value."""
    if isinstance(dtype, T.DateType):
        return F.unix_date(column).cast("double")
    if isinstance(dtype, T.TimestampType):
        return F.unix_micros(column).cast("double")
    return column.cast("double")


def sketch_of(values: Sequence[float], accuracy: int) -> State:
    """The state of one partial buffer of ``values``."""
    return _state(digest_of(values, accuracy))


def sketch_merge(stored: State, batch: State) -> State:
    """``batch``'s digest merged into ``stored``'s."""
    return _state(merge_digests(_summary(stored), _summary(batch)))


def sketch_result(state: State, percentiles: Percentiles, output_type: pa.DataType) -> Any:
    """The output value of a state: the percentiles as the input's type (a list of them for an array)."""
    found = percentiles_of(_summary(state), percentiles.percentages)
    if found is None:
        return None
    element = output_type.value_type if percentiles.array else output_type
    values = [_typed(x, element) for x in found]
    return values if percentiles.array else values[0]


def _typed(x: float, t: pa.DataType) -> Any:
    """A sample as Spark's eval converts it: integers, days and microseconds truncated, a decimal of the double's
    shortest text rounded half up to the type's scale."""
    if pa.types.is_decimal(t):
        return Decimal(repr(x)).quantize(Decimal(1).scaleb(-t.scale), rounding=ROUND_HALF_UP)
    if pa.types.is_floating(t):
        return x
    return int(x)


def _state(summary: Summary) -> State:
    return summary.relative_error, summary.count, summary.sampled


def _summary(state: State) -> Summary:
    relative_error, count, sampled = state
    return Summary(relative_error, list(sampled), count, compressed=True)
