"""``max_by`` / ``min_by``: the value of the row whose ordering is the greatest (least), as Spark's ``MaxMinBy``.

A state is ``[value, ordering]`` (ordering None: no row with a non-null ordering yet). Rows of a null ordering are
skipped; a later state replaces an earlier one unless the earlier's ordering is strictly greater (less): on ties
the later value wins, as in Spark's merge of a group's stored state (left) with a batch's (right).
Spark's order: NaN above every double, -0.0 equal to 0.0.
"""

from __future__ import annotations

import math
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

BY_FUNCTIONS = ("max_by", "min_by")


def by_partial(function: str, value: Column, ordering: Column) -> list[Column]:
    """A group of rows' partial: Spark's own ``max_by`` (``min_by``) of the group, then its ordering's extremum."""
    if function == "max_by":
        return [F.max_by(value, ordering), F.max(ordering)]
    return [F.min_by(value, ordering), F.min(ordering)]


def merge_by(function: str, earlier: list[Any], later: list[Any]) -> list[Any]:
    """The state of ``earlier`` rows followed by ``later`` ones."""
    if later[1] is None:
        return earlier
    if earlier[1] is None:
        return later
    a, b = spark_rank(earlier[1]), spark_rank(later[1])
    return earlier if (a > b if function == "max_by" else a < b) else later


def spark_rank(ordering: Any) -> tuple[bool, Any]:
    """An ordering value as Spark ranks it (NaN the greatest double)."""
    if isinstance(ordering, float) and math.isnan(ordering):
        return True, 0.0
    return False, ordering


def same_ordering(a: Any, b: Any) -> bool:
    """Whether Spark ranks two (non-null) ordering values equal (NaN equals NaN, -0.0 equals 0.0)."""
    return spark_rank(a) == spark_rank(b)
