"""Values of every key type the operators group or join by, with the edge cases Spark normalizes (nulls, NaN, -0.0),
for the tests that compare a columnar operator with the per-key code it replaced."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa


def key_pool(key_type: str, rng: np.random.Generator, size: int) -> list:
    """``size`` group values of ``key_type``, nulls and (double) NaN and -0.0 among them."""
    if key_type == "long":
        return [None, *rng.integers(-(2**62), 2**62, size - 1).tolist()]
    if key_type == "string":
        return [None, "", *(f"k{i}é" for i in range(size - 2))]
    if key_type == "double":
        return [None, math.nan, -0.0, 0.0, *(float(v) for v in rng.normal(size=size - 4))]
    return [None, *(int(v) for v in rng.integers(0, 10**15, size - 1))]  # timestamp (µs)


KEY_TYPES = {"long": pa.int64(), "string": pa.string(), "double": pa.float64(), "timestamp": pa.timestamp("us", "UTC")}
