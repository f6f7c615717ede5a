"""A sketch aggregate's output as the differential test compares it with Spark's (docs/spark-queries.md): what the
sketch holds, not how its bytes lay it out.

* count-min and Theta sketches: their bytes (Spark's layout, which misa's merges give);
* HyperLogLog: its lgConfigK and mode, and its sorted coupons (list and set modes) or its registers (HLL mode): the
  bytes' hash table order and the HIP estimator kept with them depend on the order of the merges, in Spark too;
* KLL: its k, count, minimum and maximum, and (in its exact mode) its sorted items: past that mode Spark compacts at
  random;
* tuple sketches: their theta and their entries (hash, summary value) sorted: Spark's image keeps them in its hash
  table's order.
"""

from __future__ import annotations

import struct
from typing import Any

import datasketches as ds

from misa.operators.sketches import KLL_TYPES, TupleSummaries, kll_of

HLL_MODES = ("list", "set", "hll")
HLL_HEADER = 40  # an updatable HLL_8 image's preamble in HLL mode; its registers follow


def sketch_summary(column: str, image: bytes | None) -> Any:
    """What the sketch image of output ``column`` (named after its function) holds."""
    if image is None:
        return None
    image = bytes(image)
    if "hll" in column:
        return _hll(image)
    if "kll" in column:
        return _kll(column, image)
    if "tuple" in column:
        summaries = TupleSummaries("integer" if "integer" in column else "double", "sum")
        sketch = ds.compact_tuple_sketch.deserialize(image, summaries)
        return [sketch.theta64, sorted([list(entry) for entry in sketch])]
    return image


def _hll(image: bytes) -> tuple[Any, ...]:
    lg_k, mode = image[3], HLL_MODES[image[7] & 3]
    if mode == "hll":
        return lg_k, mode, image[HLL_HEADER : HLL_HEADER + (1 << lg_k)]
    start = image[0] * 4  # the preamble's ints
    coupons = struct.unpack_from(f"<{(len(image) - start) // 4}I", image, start)
    return lg_k, mode, tuple(sorted(c for c in coupons if c))


def _kll(column: str, image: bytes) -> tuple[Any, ...]:
    sketch = kll_of(next((t for t in KLL_TYPES if t in column), "double"), image)
    if sketch.is_empty():
        return sketch.k, 0
    shown = (sketch.k, sketch.n, sketch.get_min_value(), sketch.get_max_value())
    if sketch.is_estimation_mode():
        return shown
    return (*shown, tuple(sorted(item for item, _ in sketch)))
