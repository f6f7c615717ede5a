"""Spark's sketch aggregates over misa's states: ``hll_sketch_agg``, ``hll_union_agg``, ``theta_sketch_agg``,
``theta_union_agg``, ``theta_intersection_agg``, ``kll_sketch_agg_*``, ``kll_merge_agg_*`` and
``count_min_sketch``.

A batch's partial of a group is Spark's own aggregate over the group's rows (so each input type, null, empty
string and collation is updated as Spark updates it); the state is that sketch's bytes, merged on the driver into
the stored one (the stored one first, as Spark's state restore gives them) with the Apache DataSketches library
(``datasketches``, whose serialized forms the Java library Spark uses reads and writes) or, for the count-min sketch,
by adding Spark's tables cell by cell. The result is serialized as Spark's ``eval`` does: HyperLogLog as an
updatable HLL_8 image, Theta as an ordered compact image (compressed where Spark compresses), KLL compact, the
count-min sketch in Spark's own format.

What equals Spark's and what may not (docs/spark-queries.md): the count-min sketch and Theta sketches are Spark's
bytes (their merges do not depend on order); a HyperLogLog sketch holds Spark's coupons or registers, while its
estimate in HLL mode (past its list and set modes) depends on the order of the merges, as Spark's own does on its
partitions; a KLL sketch past its exact mode compacts at random in Spark, so only its count, minimum and maximum are
one value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Callable

import datasketches as ds
from pyspark.sql import Column
from pyspark.sql import functions as F

from misa.exceptions import MisaError

KINDS = {"HllSketchAgg": "hll_sketch_agg", "HllUnionAgg": "hll_union_agg", "CountMinSketchAgg": "count_min_sketch"}
KINDS |= {"ThetaSketchAgg": "theta_sketch_agg", "ThetaUnionAgg": "theta_union_agg"}
KINDS |= {"ThetaIntersectionAgg": "theta_intersection_agg"}
KLL_TYPES = ("bigint", "float", "double")
KINDS |= {f"Kll{op}Agg{t.title()}": f"kll_{op.lower()}_agg_{t}" for op in ("Sketch", "Merge") for t in KLL_TYPES}
SKETCH_FUNCTIONS = tuple(KINDS.values())
THETA_EMPTY = bytes((1, 3, 3, 0, 0, 0x1E, 0, 0))  # Java's empty compact Theta sketch (seed hash 0)
THETA_FLAGS, THETA_SINGLE_ITEM = 5, 0x20  # a compact image's flags byte; Java's single-item flag
THETA_MIN_LG = 5  # the C++ library's least lgNomEntries (Spark's is 4)
KLL_DEFAULT_K = 200
CMS_HEADER = struct.Struct(">iqii")  # version, total count, depth, width (big-endian, Spark's writeTo)


class SketchMergeError(MisaError, ValueError):
    """Two sketches of one group cannot be merged, as Spark fails the same query."""


@dataclass(frozen=True)
class Sketch:
    """A sketch aggregate and its constants as Spark's plan gives them (after the column): hll_sketch_agg
    (lgConfigK), hll_union_agg (allowDifferentLgConfigK), theta_sketch_agg and theta_union_agg (lgNomEntries),
    kll_sketch_agg_* (k), kll_merge_agg_* (k, or none: the first sketch's), count_min_sketch (eps, confidence,
    seed)."""

    function: str
    constants: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.function not in SKETCH_FUNCTIONS:
            raise ValueError(f"unknown sketch aggregate {self.function!r}; use one of {SKETCH_FUNCTIONS}")

    def __str__(self) -> str:
        return ", ".join(map(str, self.constants))

    def partial(self, column: Column) -> Column:
        """Spark's own aggregate of this sketch over a group's rows."""
        f = self.function
        if f == "count_min_sketch":
            return F.count_min_sketch(column, *(F.lit(c) for c in self.constants))
        return getattr(F, f)(column, *self.constants)

    def merge(self, stored: bytes | None, batch: bytes | None) -> bytes | None:
        """The sketch of ``stored``'s rows and ``batch``'s (either None: no rows yet)."""
        if stored is None or batch is None:
            return batch if stored is None else stored
        return _MERGES[self.function.rsplit("_", 1)[0] if "kll" in self.function else self.function](
            self, stored, batch
        )


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
    a = _kll_of(kind, stored)
    a.merge(_kll_of(kind, batch))
    return a.serialize(ds.PyLongsSerDe()) if kind == "bigint" else a.serialize()


def _kll_of(kind: str, image: bytes) -> Any:
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
    cells = depth * width
    a = struct.unpack_from(f">{cells}q", stored, seeds)
    b = struct.unpack_from(f">{cells}q", batch, seeds)
    table = struct.pack(f">{cells}q", *(x + y for x, y in zip(a, b)))
    return CMS_HEADER.pack(version, total + other[1], depth, width) + stored[header:seeds] + table


_MERGES: dict[str, Callable[[Sketch, bytes, bytes], bytes]] = {
    "hll_sketch_agg": _hll,
    "hll_union_agg": _hll,
    "theta_sketch_agg": _theta,
    "theta_union_agg": _theta,
    "theta_intersection_agg": _theta,
    "kll_sketch_agg": _kll,
    "kll_merge_agg": _kll,
    "count_min_sketch": _count_min,
}
