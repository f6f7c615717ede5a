"""Spark's ``vector_sum`` and ``vector_avg`` (element-wise over arrays of floats) over misa's states.

A batch's partial of a group is Spark's own aggregate of its rows with the number of vectors it took (a null
vector, or one holding a null, is skipped); the stored one merges with it as Spark merges two buffers, in floats
(Java's single precision, rounded at each step): sums added, averages weighted by their counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

from misa.exceptions import MisaError

FUNCTIONS = ("vector_sum", "vector_avg")
KINDS = {"VectorSum": "vector_sum", "VectorAvg": "vector_avg"}


class VectorDimensionError(MisaError, ValueError):
    """Two vectors of one group differ in length, as Spark fails the same query."""


def partial(function: str, column: Column) -> Column:
    """Spark's aggregate of a group's vectors, and how many it took."""
    taken = F.count_if(column.isNotNull() & ~F.exists(column, lambda x: x.isNull()))
    return F.struct(F.call_function(function, column).alias("value"), taken.alias("count"))


def merge(function: str, stored: dict | None, batch: dict | None) -> dict | None:
    """Spark's merge of the stored buffer with the batch's (``mergeElements``)."""
    if stored is None or not stored["count"]:
        return batch
    if batch is None or not batch["count"]:
        return stored
    left, right = (np.array(s["value"], np.float32) for s in (stored, batch))
    if len(left) != len(right):
        raise VectorDimensionError(
            f"[VECTOR_DIMENSION_MISMATCH] {function}: vectors of {len(left)} and {len(right)} elements in one group; "
            "give every vector of a group one length"
        )
    count = stored["count"] + batch["count"]
    if function == "vector_sum":
        merged = left + right
    else:
        weights = np.float32(stored["count"]) / np.float32(count), np.float32(batch["count"]) / np.float32(count)
        merged = left * weights[0] + right * weights[1]
    return {"value": [float(x) for x in merged.astype(np.float32)], "count": count}


def result(state: dict | None) -> Any:
    """The group's vector (null: no vector taken)."""
    return None if state is None or not state["count"] else state["value"]


def result_type(state_type: pa.DataType) -> pa.DataType:
    return state_type.field("value").type
