"""Exact percentiles: ``percentile(col, p)``, ``median(col)``, ``percentile_cont(p) WITHIN GROUP (ORDER BY col)`` and
``percentile_disc(p) WITHIN GROUP (ORDER BY col)``, as Spark's ``Percentile`` and ``PercentileDisc`` compute them.

A state is the group's counts per value (:mod:`.mode`'s, merged across batches, panes and sessions by adding counts).
The result sorts the values in Spark's order (NaN above every number; ``ORDER BY col DESC``: reversed), takes the
position ``(n - 1) * p`` among the ``n`` counted values and, for ``percentile`` / ``percentile_cont``, interpolates
linearly between the values at its floor and ceiling as Spark 4.3 does, in doubles (``low + (high - low) * fraction``:
the rounding of Spark's own order of operations, measured); ``percentile_disc`` takes the first
value whose cumulative count reaches ``n * p`` (Spark 4's, the value of the least ``cume_dist()`` at or above ``p``;
``spark.sql.legacy.percentileDiscCalculation=true`` is refused). Null for a group without a non-null value; an array
of percentages gives an array.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate
from typing import Any

from misa.operators.extremum_by import spark_rank
from misa.operators.mode import Counts

EXACT_PERCENTILES = ("percentile", "percentile_desc", "percentile_disc", "percentile_disc_desc")


def percentiles_of(function: str, counts: Counts, percentages: tuple[float, ...], array: bool) -> Any:
    """The result of ``function`` over the ``counts`` of a group's values: a double, or a list for an array."""
    if not counts:
        return None
    ordered = sorted(counts.values(), key=lambda entry: spark_rank(entry[0]), reverse=function.endswith("_desc"))
    values = [float(value) for value, _ in ordered]  # decimals: their nearest double, as Spark's toDouble
    cumulative = list(accumulate(count for _, count in ordered))
    if function.startswith("percentile_disc"):
        found = [values[bisect_left(cumulative, math.ceil(cumulative[-1] * p))] for p in percentages]
    else:
        found = [_interpolated(values, cumulative, (cumulative[-1] - 1) * p) for p in percentages]
    return found if array else found[0]


def _interpolated(values: list[float], cumulative: list[int], position: float) -> float:
    """The value at ``position`` (0-based, among the counted values), as Spark's ``getPercentile`` interpolates it."""
    lower, higher = math.floor(position), math.ceil(position)
    low = bisect_left(cumulative, lower + 1)
    if higher == lower:
        return values[low]
    high = bisect_left(cumulative, higher + 1)
    if high == low:
        return values[low]
    return values[low] + (values[high] - values[low]) * (position - lower)  # Spark 4.3's order of operations
