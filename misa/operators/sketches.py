"""Spark's sketch aggregates over misa's states: ``hll_sketch_agg``, ``hll_union_agg``, ``theta_sketch_agg``,
``theta_union_agg``, ``theta_intersection_agg``, ``kll_sketch_agg_*``, ``kll_merge_agg_*``, ``tuple_sketch_agg_*``,
``tuple_union_agg_*``, ``tuple_intersection_agg_*``, ``count_min_sketch``, and the bitmaps ``bitmap_construct_agg``,
``bitmap_or_agg``, ``bitmap_and_agg``, the frequent items of ``approx_top_k``, ``approx_top_k_accumulate``,
``approx_top_k_combine`` (:mod:`.approx_top_k`), ``schema_of_variant_agg`` (:mod:`.variant_schema`), and the
element-wise ``vector_sum`` and ``vector_avg`` of float arrays (:mod:`.vector_aggs`).

A batch's partial of a group is Spark's own aggregate over the group's rows (so each input type, null, empty
string and collation is updated as Spark updates it); the state is that sketch's bytes, merged on the driver into
the stored one (the stored one first, as Spark's state restore gives them) with the Apache DataSketches library
(``datasketches``, whose serialized forms the Java library Spark uses reads and writes), or by adding the count-min
sketch's tables cell by cell, or-ing (and-ing) the bitmaps' bits. The result is serialized as Spark's ``eval`` does:
HyperLogLog as an updatable HLL_8 image, Theta as an ordered compact image (compressed where Spark compresses), KLL
compact, a tuple sketch compact and unordered, the count-min sketch and the bitmaps in Spark's own formats.

What equals Spark's and what may not (docs/spark-queries.md): the count-min sketch, the bitmaps and Theta sketches
are Spark's bytes (their merges do not depend on order); a HyperLogLog sketch holds Spark's coupons or registers,
while its estimate in HLL mode (past its list and set modes) depends on the order of the merges, as Spark's own does
on its partitions; a KLL sketch past its exact mode compacts at random in Spark, so only its count, minimum and
maximum are one value; a tuple sketch holds Spark's entries, its double sums added in the order of the merges.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, Callable

import datasketches as ds
import numpy as np
from pyspark.sql import Column
from pyspark.sql import functions as F

from misa.exceptions import MisaError
from misa.operators import approx_top_k, vector_aggs
from misa.operators.variant_schema import merge_printed

KINDS = {"HllSketchAgg": "hll_sketch_agg", "HllUnionAgg": "hll_union_agg", "CountMinSketchAgg": "count_min_sketch"}
KINDS |= {"ThetaSketchAgg": "theta_sketch_agg", "ThetaUnionAgg": "theta_union_agg"}
KINDS |= {"ThetaIntersectionAgg": "theta_intersection_agg"}
KLL_TYPES = ("bigint", "float", "double")
KINDS |= {f"Kll{op}Agg{t.title()}": f"kll_{op.lower()}_agg_{t}" for op in ("Sketch", "Merge") for t in KLL_TYPES}
SUMMARIES = ("double", "integer")  # a tuple sketch's summary types (Java's DoubleSummary, IntegerSummary)
TUPLE_OPS = {"Sketch": "sketch", "Union": "union", "Intersection": "intersection"}
KINDS |= {f"Tuple{op}Agg{t.title()}": f"tuple_{f}_agg_{t}" for op, f in TUPLE_OPS.items() for t in SUMMARIES}
TWO_COLUMN_SKETCHES = tuple(f"tuple_sketch_agg_{t}" for t in SUMMARIES)  # of a key and a summary value
KINDS |= {
    "BitmapConstructAgg": "bitmap_construct_agg",
    "BitmapOrAgg": "bitmap_or_agg",
    "BitmapAndAgg": "bitmap_and_agg",
}
KINDS |= approx_top_k.KINDS | {"SchemaOfVariantAgg": "schema_of_variant_agg"} | vector_aggs.KINDS
SKETCH_FUNCTIONS = tuple(KINDS.values())


def column_count(function: str) -> int:
    """How many of a sketch aggregate's arguments are columns (its constants follow them)."""
    return 2 if function in TWO_COLUMN_SKETCHES else 1


THETA_EMPTY = bytes((1, 3, 3, 0, 0, 0x1E, 0, 0))  # Java's empty compact Theta sketch (seed hash 0)
THETA_FLAGS, THETA_SINGLE_ITEM = 5, 0x20  # a compact image's flags byte; Java's single-item flag
THETA_MIN_LG = 5  # the C++ library's least lgNomEntries (Spark's is 4)
CMS_HEADER = struct.Struct(">iqii")  # version, total count, depth, width (big-endian, Spark's writeTo)
MODES = ("sum", "min", "max", "alwaysone")  # a tuple summary's mode: its ordinal is the byte Java stores with it
SUMMARY_FORMATS = {"double": "<db", "integer": "<ib"}  # the value (little-endian), then the mode's ordinal
INT_LIMITS = (-(1 << 31), (1 << 31) - 1)


class SketchMergeError(MisaError, ValueError):
    """Two sketches of one group cannot be merged, as Spark fails the same query."""


@dataclass(frozen=True)
class Sketch:
    """A sketch aggregate and its constants as Spark's plan gives them (after the columns): hll_sketch_agg
    (lgConfigK), hll_union_agg (allowDifferentLgConfigK), theta_sketch_agg and theta_union_agg (lgNomEntries),
    kll_sketch_agg_* (k), kll_merge_agg_* (k, or none: the first sketch's), count_min_sketch (eps, confidence,
    seed), tuple_sketch_agg_* (of a key and a summary column) and tuple_union_agg_* (lgNomEntries, mode),
    tuple_intersection_agg_* (mode), the bitmaps (none), approx_top_k (k, maxItemsTracked), approx_top_k_accumulate
    and approx_top_k_combine (maxItemsTracked; combine's -1: none given)."""

    function: str
    constants: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.function not in SKETCH_FUNCTIONS:
            raise ValueError(f"unknown sketch aggregate {self.function!r}; use one of {SKETCH_FUNCTIONS}")

    def __str__(self) -> str:
        return ", ".join(map(str, self.constants))

    def partial(self, column: Column, summary: Column | None = None) -> Column:
        """Spark's own aggregate of this sketch over a group's rows (a tuple sketch's: of ``summary`` too)."""
        f = self.function
        if f in vector_aggs.FUNCTIONS:
            return vector_aggs.partial(f, column)
        if f in approx_top_k.FUNCTIONS:
            return approx_top_k.partial(f, self.constants, column)
        if f == "count_min_sketch":
            return F.count_min_sketch(column, *(F.lit(c) for c in self.constants))
        return getattr(F, f)(column, *([summary] if f in TWO_COLUMN_SKETCHES else []), *self.constants)

    def merge(self, stored: Any, batch: Any) -> Any:
        """The sketch of ``stored``'s rows and ``batch``'s (either None: no rows yet; approx_top_k's: merged into a
        fresh buffer, as Spark's state store merges it, even with nothing stored)."""
        if self.function in vector_aggs.FUNCTIONS:
            return vector_aggs.merge(self.function, stored, batch)
        if self.function in approx_top_k.FUNCTIONS and batch is not None:
            return approx_top_k.merge(self.function, self.constants, stored, batch)
        if stored is None or batch is None:
            return batch if stored is None else stored
        return _MERGES[self.function.split("_")[0]](self, stored, batch)

    def result(self, state: Any) -> Any:
        """The output of a stored sketch, as Spark's ``eval`` gives it."""
        if self.function in approx_top_k.FUNCTIONS:
            return approx_top_k.result(self.function, self.constants, state)
        if self.function in vector_aggs.FUNCTIONS:
            return vector_aggs.result(state)
        return state


def _hll(sketch: Sketch, stored: bytes, batch: bytes) -> bytes:
    """Spark's merge of two HyperLogLog buffers: a union of the stored one's lgConfigK (hll_union_agg: refused
    across lgConfigK unless allowed, as Spark's HLL_UNION_DIFFERENT_LG_K)."""
    a, b = ds.hll_sketch.deserialize(stored), ds.hll_sketch.deserialize(batch)
    if sketch.function == "hll_union_agg" and not sketch.constants[0] and a.lg_config_k != b.lg_config_k:
        raise SketchMergeError(
            f"[HLL_UNION_DIFFERENT_LG_K] hll_union_agg: sketches of lgConfigK {a.lg_config_k} and {b.lg_config_k} "
            "in one group; pass allowDifferentLgConfigK=true, or build the sketches with one lgConfigK"
        )
    union = ds.hll_union(a.lg_config_k)
    union.update(a)
    union.update(b)
    return union.get_result(ds.HLL_8).serialize_updatable()


def _theta(sketch: Sketch, stored: bytes, batch: bytes) -> bytes:
    """A union (theta_sketch_agg, theta_union_agg) or an intersection of two Theta sketches, ordered and compressed
    as Spark's ``toByteArrayCompressed``."""
    a, b = ds.compact_theta_sketch.deserialize(stored), ds.compact_theta_sketch.deserialize(batch)
    operation: Any = (
        ds.theta_intersection() if sketch.function == "theta_intersection_agg" else ds.theta_union(sketch.constants[0])
    )
    operation.update(a)
    operation.update(b)
    result = operation.get_result(True)
    if result.is_empty():
        return THETA_EMPTY
    image = bytearray(result.serialize(True))
    if result.num_retained == 1 and not result.is_estimation_mode():
        image[THETA_FLAGS] |= THETA_SINGLE_ITEM  # Java's flag of a one-entry image, which C++ leaves unset
    return bytes(image)


def _kll(sketch: Sketch, stored: bytes, batch: bytes) -> bytes:
    """The stored KLL sketch (its k kept) merged with the batch's, compact."""
    kind = sketch.function.rsplit("_", 1)[1]
    a = kll_of(kind, stored)
    a.merge(kll_of(kind, batch))
    return a.serialize(ds.PyLongsSerDe()) if kind == "bigint" else a.serialize()


def kll_of(kind: str, image: bytes) -> Any:
    """A KLL sketch of ``kind`` (bigint, float, double) from its image."""
    if kind == "bigint":
        return ds.kll_items_sketch.deserialize(image, ds.PyLongsSerDe())
    return (ds.kll_floats_sketch if kind == "float" else ds.kll_doubles_sketch).deserialize(image)


def _count_min(sketch: Sketch, stored: bytes, batch: bytes) -> bytes:
    """Spark's ``mergeInPlace``: the totals and the tables added, the same depth, width and hash seeds required."""
    header = CMS_HEADER.size
    version, total, depth, width = CMS_HEADER.unpack_from(stored)
    other = CMS_HEADER.unpack_from(batch)
    seeds = header + 8 * depth
    if other[2:] != (depth, width) or stored[header:seeds] != batch[header:seeds]:
        raise SketchMergeError(
            "count_min_sketch: two sketches of one group differ in depth, width or hash seeds; Spark's "
            "IncompatibleMergeException (the same eps, confidence and seed in every batch)"
        )
    table = np.frombuffer(stored, ">i8", offset=seeds) + np.frombuffer(batch, ">i8", offset=seeds)  # native order
    return (
        CMS_HEADER.pack(version, total + other[1], depth, width) + stored[header:seeds] + table.astype(">i8").tobytes()
    )


class TupleSummaries(ds.PyObjectSerDe):
    """Java's DoubleSummary or IntegerSummary as the tuple sketch's image holds it: the value, then its mode."""

    def __init__(self, summary: str, mode: str):
        super().__init__()
        self.format = struct.Struct(SUMMARY_FORMATS[summary])
        self.mode = MODES.index(mode)

    def get_size(self, item: Any) -> int:
        return self.format.size

    def to_bytes(self, item: Any) -> bytes:
        return self.format.pack(item, self.mode)

    def from_bytes(self, data: bytes, offset: int) -> tuple[Any, int]:
        return self.format.unpack_from(data, offset)[0], self.format.size


class _Combine(ds.TuplePolicy):
    """Java's summary set operation of a mode: a new summary of the mode updated with both values in turn (sum
    from zero, integers wrapping as Java's; min, max from the infinities or the int limits; alwaysone: 1)."""

    def __init__(self, summary: str, mode: str):
        super().__init__()
        self.summary = summary
        self.mode = mode

    def create_summary(self) -> Any:
        low, high = (-math.inf, math.inf) if self.summary == "double" else INT_LIMITS
        start: dict[str, Any] = {"sum": 0.0 if self.summary == "double" else 0, "min": high, "max": low}
        return start.get(self.mode, 1.0 if self.summary == "double" else 1)

    def update_summary(self, summary: Any, value: Any) -> Any:
        if self.mode == "sum":
            total = summary + value
            return total if self.summary == "double" else (total - INT_LIMITS[0]) % (1 << 32) + INT_LIMITS[0]
        if self.mode == "min":
            return value if value < summary else summary
        if self.mode == "max":
            return value if value > summary else summary
        return summary

    def __call__(self, a: Any, b: Any) -> Any:
        return self.update_summary(self.update_summary(self.create_summary(), a), b)


def _tuple(sketch: Sketch, stored: bytes, batch: bytes) -> bytes:
    """A union (tuple_sketch_agg_*, tuple_union_agg_*) or an intersection of two tuple sketches, their summaries
    combined by the aggregate's mode as Java's set operations combine them; compact, unordered as Spark's."""
    summary, mode = sketch.function.rsplit("_", 1)[1], str(sketch.constants[-1]).lower()
    summaries, combine = TupleSummaries(summary, mode), _Combine(summary, mode)
    operation: Any = (
        ds.tuple_intersection(combine)
        if sketch.function.startswith("tuple_intersection")
        else ds.tuple_union(combine, sketch.constants[0])
    )
    operation.update(ds.compact_tuple_sketch.deserialize(stored, summaries))
    operation.update(ds.compact_tuple_sketch.deserialize(batch, summaries))
    return operation.get_result(False).serialize(summaries)


def _bitmap(sketch: Sketch, stored: bytes, batch: bytes) -> bytes:
    """Spark's merge of two bitmaps (4096 bytes each): their bits or-ed (bitmap_construct_agg, bitmap_or_agg) or
    and-ed (bitmap_and_agg)."""
    a, b = np.frombuffer(stored, np.uint8), np.frombuffer(batch, np.uint8)
    return (np.bitwise_and(a, b) if sketch.function == "bitmap_and_agg" else np.bitwise_or(a, b)).tobytes()


_MERGES: dict[str, Callable[[Sketch, bytes, bytes], bytes]] = {  # by the function's first word
    "hll": _hll,
    "theta": _theta,
    "kll": _kll,
    "count": _count_min,
    "tuple": _tuple,
    "bitmap": _bitmap,
    "schema": lambda sketch, stored, batch: merge_printed(stored, batch),  # schema_of_variant_agg's printed schemas
}
