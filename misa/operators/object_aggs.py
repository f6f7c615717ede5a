"""Aggregates whose state is a Python value per group, merged group by group on the driver.

The vectorized states of :class:`misa.state.codec.AggStates` hold one int64 or float64 per aggregate; these
do not fit there, and are kept here with Spark's semantics:

* ``first`` / ``last`` (Spark's default ``ignoreNulls=false``): the value of the group's first (last) row,
  null included, in the order Spark reads the rows; any input type; ``first_ignore_nulls`` /
  ``last_ignore_nulls`` (``ignorenulls=True``): the first (last) non-null value, null if there is none;
* ``min`` / ``max`` of strings, booleans, binary values and decimals;
* ``sum`` / ``avg`` of decimals, exactly: Spark's result types (sum: ``decimal(p + 10, s)``, avg:
  ``decimal(p + 4, s + 4)``, rounded half up); a sum beyond its precision is null, as Spark's is without ANSI
  mode and an error with it;
* ``collect_list`` / ``collect_set`` (nulls skipped; an empty group gives an empty array) and ``collect_union``
  (the distinct elements of a group's arrays, as collect_set keeps values; ``collect_union_nulls``: ``RESPECT
  NULLS``, one null element kept), bounded by
  ``spark.misa.aggregate.collectMaxItems`` items per group: more fails the batch, naming the group's
  aggregate and the setting, rather than dropping values;
* ``max_by`` / ``min_by`` (:mod:`.extremum_by`): the value of the row of the greatest (least) ordering;
  ``max_by_k`` / ``min_by_k`` (:mod:`.top_k_by`): the values of the ``k`` rows of the greatest (least) orderings;
* ``mode`` / ``mode_highest`` (:mod:`.mode`): the most frequent value, of the counts per value;
* ``percentile`` / ``percentile_disc`` (:mod:`.percentile`; ``_desc``: ``ORDER BY col DESC``): exact percentiles, of
  the counts per value;
* ``percentile_approx`` (:mod:`.percentile_approx`): Spark's quantile sketch of the values as doubles, each
  batch's built from its rows (the partial is their list), merged into the stored one, read as the input's type;
* ``histogram_numeric`` (:mod:`.histogram`): Spark's streaming histogram of the values as doubles, built and merged
  alike, its bins' centres read as the input's type;
* the sketch aggregates (:mod:`.sketches`): Spark's own sketch of each batch's rows, merged into the stored one;
* ``approx_count_distinct``: a HyperLogLog sketch of Spark's hash (``xxhash64``, seed 42) with Spark's register
  count for its default relative error (0.05: 512 registers); small counts use linear counting, as Spark's
  HyperLogLog++ does, so they equal Spark's; larger ones have Spark's relative standard deviation (tests measure
  it), without Spark's bias table.

Each delta row carries, per aggregate ``i``, its partial value ``_o{i}`` (Spark computes it per group of the
batch; max_by and min_by: with its ordering ``_r{i}``) and its count of non-null inputs ``_c{i}``; the state value
of a group is the pickled list of the aggregates' states, stored after the vectorized cells.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.exceptions import AggregateOverflowError, MisaError
from misa.operators.approx_top_k import result_type as approx_top_k_type
from misa.operators.extremum_by import BY_FUNCTIONS, by_partial, merge_by
from misa.operators.histogram import histogram_merge, histogram_of, histogram_result
from misa.operators.mode import MODE_FUNCTIONS, counts_of, merge_counts, mode_of
from misa.operators.percentile import EXACT_PERCENTILES, percentiles_of
from misa.operators.percentile_approx import (
    Percentiles,
    as_doubles,
    percentile_partial,
    sketch_merge,
    sketch_of,
    sketch_result,
)
from misa.operators.set_values import set_union
from misa.operators.sketches import SKETCH_FUNCTIONS, Sketch
from misa.operators.top_k_by import TOP_K_FUNCTIONS, heap_of, merge_heaps, top_k_partial, top_k_result
from misa.operators.vector_aggs import FUNCTIONS as VECTOR_FUNCTIONS
from misa.operators.vector_aggs import result_type as vector_type

# aggregates whose result depends on the order their rows reach Spark's buffer (what of them), refused over sliding
# windows (Spark builds each window's from its rows; misa merges panes) and session windows (Spark merges sessions'
# buffers in its own order)
MERGE_ORDERED = {"histogram_numeric": "histogram", "approx_top_k": "frequent items (ties in the order rows came)"}
MERGE_ORDERED |= {"approx_top_k_accumulate": "frequent-items sketch", "approx_top_k_combine": "frequent-items sketch"}
MERGE_ORDERED |= {"vector_sum": "float sums (rounded in the order rows came)", "vector_avg": "float averages"}
SETS = ("collect_set", "collect_union", "collect_union_nulls")  # states of distinct values (set_values)
OBJECT_FUNCTIONS = ("first", "last", "first_ignore_nulls", "last_ignore_nulls", "collect_list", *SETS)
OBJECT_FUNCTIONS += ("approx_count_distinct", *BY_FUNCTIONS, *TOP_K_FUNCTIONS, *MODE_FUNCTIONS, "percentile_approx")
OBJECT_FUNCTIONS += (*EXACT_PERCENTILES, "histogram_numeric", *SKETCH_FUNCTIONS)
COUNTED = (*MODE_FUNCTIONS, *EXACT_PERCENTILES)  # states of counts per value (:mod:`.mode`)
FIRST, LAST = ("first", "first_ignore_nulls"), ("last", "last_ignore_nulls")
OBJECT_ORDERED = (T.StringType, T.BooleanType, T.BinaryType, T.DecimalType)
HLL_PRECISION = 9  # Spark's for relativeSD 0.05: ceil(2 * log2(1.106 / 0.05))
HLL_LINEAR_LIMIT = 400  # HyperLogLog++'s threshold for linear counting at this precision
OVERFLOW = "overflow"  # a decimal sum past its precision


class CollectLimitError(MisaError, RuntimeError):
    """A collect_list / collect_set group grew past ``spark.misa.aggregate.collectMaxItems``."""


def is_object(function: str, dtype: T.DataType | None) -> bool:
    """Whether ``function`` over ``dtype`` keeps its state here."""
    if function in OBJECT_FUNCTIONS:
        return True
    if function in ("min", "max"):
        return isinstance(dtype, OBJECT_ORDERED)
    return function in ("sum", "avg") and isinstance(dtype, T.DecimalType)


def check_collect_limit(function: str, name: str, items: int, limit: int) -> None:
    """Fail the batch when collect_list / collect_set ``name`` of a group holds more than ``limit`` items."""
    if items > limit:
        raise CollectLimitError(
            f"{function} {name}: a group holds more than {limit} items (spark.misa.aggregate.collectMaxItems); "
            "raise the setting, or bound the group (a window, a coarser key) so its list stays small"
        )


def merge_ordered(aggs: Sequence[Any]) -> str | None:
    """The first function of :data:`MERGE_ORDERED` among ``aggs`` (each with its ``function``), or None."""
    functions = {a.function for a in aggs}
    return next((f for f in MERGE_ORDERED if f in functions), None)


def object_partial(
    function: str,
    column: Column,
    dtype: T.DataType,
    other: Column | None = None,
    percentiles: Percentiles | None = None,
    sketch: Sketch | None = None,
    k: int | None = None,
) -> list[Column]:
    """The Spark-side partial columns of an object aggregate over one group: its value, then (avg of decimals,
    percentile_approx of ``percentiles``) a typed null carrying the result type, (max_by, min_by) the extremum of
    the ordering ``other``; a sketch aggregate's: Spark's ``sketch`` of the group's rows; max_by_k's, min_by_k's:
    Spark's top ``k`` by ``other``."""
    if sketch is not None:
        return [sketch.partial(column, other)]
    if function in TOP_K_FUNCTIONS:
        assert other is not None and k is not None
        return [top_k_partial(function, column, other, k)]
    if function == "percentile_approx":
        assert percentiles is not None
        return percentile_partial(column, dtype, percentiles)
    if function == "histogram_numeric":  # the group's values as doubles; a typed null of the result
        return [F.collect_list(as_doubles(column, dtype)), F.lit(None).cast(histogram_type(dtype))]
    if function in EXACT_PERCENTILES:  # the group's values, counted on the driver; a typed null of the result
        assert percentiles is not None
        return [F.collect_list(column), F.lit(None).cast(exact_result_type(percentiles))]
    if function in BY_FUNCTIONS:
        assert other is not None
        return by_partial(function, column, other)
    if function == "approx_count_distinct":
        return [F.collect_set(F.when(column.isNotNull(), F.xxhash64(column)))]
    if function == "avg":
        assert isinstance(dtype, T.DecimalType)
        result = T.DecimalType(min(38, dtype.precision + 4), min(38, dtype.scale + 4))
        return [F.sum(column), F.lit(None).cast(result)]
    functions = {
        "mode": F.collect_list,  # the group's values, counted on the driver
        "mode_highest": F.collect_list,
        "first": F.first,
        "last": F.last,
        "first_ignore_nulls": lambda c: F.first(c, ignorenulls=True),
        "last_ignore_nulls": lambda c: F.last(c, ignorenulls=True),
        "min": F.min,
        "max": F.max,
        "sum": F.sum,
        "collect_list": F.collect_list,
        "collect_set": F.collect_set,
        "collect_union": F.collect_union,
        # RESPECT NULLS, as pyspark documents it (collect_union's own clause is SQL's only)
        "collect_union_nulls": lambda c: F.array_distinct(F.flatten(F.collect_list(c))),
    }
    return [functions[function](column)]


@dataclass(frozen=True)
class ObjectAgg:
    """One object aggregate: output ``name``, ``function``, its partial values' Arrow type and output type."""

    name: str
    function: str
    index: int  # the aggregate's position: its delta columns are _o{index}, _c{index}
    value_type: pa.DataType
    output_type: pa.DataType
    percentiles: Percentiles | None = None  # percentile_approx's
    bins: int | None = None  # histogram_numeric's
    sketch: Sketch | None = None  # a sketch aggregate's
    k: int | None = None  # max_by_k's, min_by_k's

    def identity(self) -> Any:
        if self.sketch is not None:
            return None  # no rows yet: the first batch's sketch is the state
        if self.function in TOP_K_FUNCTIONS:
            return [[], [], []]  # an empty heap
        if self.function == "histogram_numeric":
            return []
        if self.function == "percentile_approx":
            return sketch_of([], self._percentiles.accuracy)
        if self.function == "approx_count_distinct":
            return bytes(1 << HLL_PRECISION)
        if self.function in BY_FUNCTIONS:
            return [None, None]  # value, ordering
        if self.function in COUNTED:
            return {}  # counts per value
        return [None, 0]  # value, count (first/last: rows seen; ignoring nulls: values seen)

    def of_row(self, value: Any, count: Any) -> Any:
        """The state of one delta row (max_by, min_by: ``count`` is the ordering)."""
        if self.sketch is not None:
            return value
        if self.function in TOP_K_FUNCTIONS:
            return heap_of(self.function, value, self._k)
        if self.function == "approx_count_distinct":
            return _registers(value or [])
        if self.function in COUNTED:
            return counts_of(value or [])
        if self.function == "percentile_approx":
            return sketch_of(value or [], self._percentiles.accuracy)
        if self.function == "histogram_numeric":
            return histogram_of(value or [], self._bins)
        if self.function in ("first", "last"):
            return [value, 1]
        if self.function in FIRST + LAST:
            return [value, int(value is not None)]
        if self.function in SETS[1:]:  # the batch's distinct elements, as Spark's set keeps them
            return [set_union([], value or []), count]
        return [value, count]

    def merge(self, a: Any, b: Any, limit: int) -> Any:
        """``a`` (earlier rows) folded with ``b`` (later rows)."""
        f = self.function
        if self.sketch is not None:
            return self.sketch.merge(a, b)
        if f in TOP_K_FUNCTIONS:
            return merge_heaps(f, a, b, self._k)
        if f == "approx_count_distinct":
            return bytes(np.maximum(np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)))
        if f in BY_FUNCTIONS:
            return merge_by(f, a, b)
        if f in COUNTED:
            return merge_counts(a, b)
        if f == "percentile_approx":
            return sketch_merge(a, b)
        if f == "histogram_numeric":
            return histogram_merge(a, b, self._bins)
        (x, n), (y, m) = a, b
        if f in FIRST:
            return a if n else b
        if f in LAST:
            return b if m else a
        if not n or x is None:
            return b
        if not m or y is None:
            return a
        if f == "min":
            return [min(x, y), n + m]
        if f == "max":
            return [max(x, y), n + m]
        if f in ("sum", "avg"):
            total = OVERFLOW if OVERFLOW in (x, y) else x + y
            if total != OVERFLOW and _digits(total) > self.value_type.precision - self.value_type.scale:
                total = OVERFLOW
            return [total, n + m]
        merged = set_union(x, y) if f in SETS else x + y
        check_collect_limit(f, self.name, len(merged), limit)
        return [merged, n + m]

    def result(self, state: Any, ansi: bool) -> Any:
        """The output value of a state."""
        f = self.function
        if self.sketch is not None:
            assert state is not None, f"{f} {self.name}: a state without rows"
            return self.sketch.result(state)  # in the form Spark's eval gives
        if f == "approx_count_distinct":
            return _estimate(state)
        if f in MODE_FUNCTIONS:
            return mode_of(f, state)
        if f in TOP_K_FUNCTIONS:
            return top_k_result(f, state)
        if f in EXACT_PERCENTILES:
            return percentiles_of(f, state, self._percentiles.percentages, self._percentiles.array)
        if f == "percentile_approx":
            return sketch_result(state, self._percentiles, self.output_type)
        if f == "histogram_numeric":
            return histogram_result(state, self.output_type.value_type.field("x").type)
        value, count = state  # max_by, min_by: value, ordering
        if f in ("collect_list", *SETS):
            return value if count else []
        if f in FIRST + LAST + BY_FUNCTIONS:
            return value
        if not count or value is None:
            return None
        if value == OVERFLOW:
            if ansi:
                raise AggregateOverflowError(
                    f"[ARITHMETIC_OVERFLOW] decimal sum {self.name} exceeds {self.value_type}, as Spark raises with "
                    "spark.sql.ansi.enabled=true; set it to false for a null result, or cast to a wider decimal"
                )
            return None
        if f == "avg":
            with localcontext() as context:
                context.prec = 80
                return (value / count).quantize(Decimal(1).scaleb(-self.output_type.scale), rounding=ROUND_HALF_UP)
        return value

    @property
    def _k(self) -> int:
        assert self.k is not None, f"{self.function} {self.name} without its k"
        return self.k

    @property
    def _bins(self) -> int:
        assert self.bins is not None, f"histogram_numeric {self.name} without its number of bins"
        return self.bins

    @property
    def _percentiles(self) -> Percentiles:
        assert self.percentiles is not None, f"{self.function} {self.name} without its percentiles"
        return self.percentiles


class ObjectValues:
    """The object aggregates of a batch's deltas: states per row, folded per key, merged, stored, output."""

    def __init__(self, aggs: Sequence[ObjectAgg], ansi: bool, limit: int):
        self.aggs = list(aggs)
        self.ansi = ansi
        self.limit = limit

    @classmethod
    def of(cls, names: Sequence[tuple[Any, ...]], schema: pa.Schema, ansi: bool, limit: int) -> ObjectValues:
        """The object aggregates among ``names`` ((index, name, function[, percentiles, bins, sketch, k])) whose
        columns the deltas carry."""
        aggs = []
        for index, name, function, *constants in names:
            if f"_o{index}" not in schema.names:
                continue
            value_type = schema.field(f"_o{index}").type
            output_type = _output_type(function, value_type, schema, index)
            aggs.append(ObjectAgg(name, function, index, value_type, output_type, *constants))
        return cls(aggs, ansi, limit)

    def __bool__(self) -> bool:
        return bool(self.aggs)

    def delta_states(self, deltas: pa.Table) -> list[list[Any]]:
        """Per delta row, the list of its aggregates' states."""
        columns = [zip(deltas[f"_o{a.index}"].to_pylist(), self._counts(deltas, a), strict=True) for a in self.aggs]
        return [[a.of_row(v, c) for a, (v, c) in zip(self.aggs, row)] for row in zip(*columns)]

    @staticmethod
    def _counts(deltas: pa.Table, agg: ObjectAgg) -> list[Any]:
        """Per delta row, aggregate ``agg``'s count of inputs (max_by, min_by: its ordering's extremum)."""
        return deltas[f"_{'r' if agg.function in BY_FUNCTIONS else 'c'}{agg.index}"].to_pylist()

    def per_key(self, states: list[list[Any]], key_of_row: np.ndarray, keys: int) -> list[list[Any]]:
        """The rows' states folded per key, rows in order."""
        folded: list[list[Any] | None] = [None] * keys
        for row, key in zip(states, key_of_row.tolist()):
            previous = folded[key]
            folded[key] = row if previous is None else self.merge_one(previous, row)
        return [f if f is not None else self.identity() for f in folded]

    def identity(self) -> list[Any]:
        return [a.identity() for a in self.aggs]

    def merge_one(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [agg.merge(x, y, self.limit) for agg, x, y in zip(self.aggs, a, b)]

    def merge(self, old: list[list[Any]], delta: list[list[Any]]) -> list[list[Any]]:
        return [self.merge_one(a, b) for a, b in zip(old, delta)]

    def decode(self, tails: Sequence[bytes | None]) -> list[list[Any]]:
        return [pickle.loads(t) if t else self.identity() for t in tails]

    @staticmethod
    def encode(states: list[list[Any]]) -> list[bytes]:
        return [pickle.dumps(s, protocol=5) for s in states]

    def columns(self, states: list[list[Any]]) -> dict[str, pa.Array]:
        """The output columns of ``states``."""
        return {
            a.name: pa.array([a.result(s[i], self.ansi) for s in states], a.output_type)
            for i, a in enumerate(self.aggs)
        }


def _output_type(function: str, value_type: pa.DataType, schema: pa.Schema, index: int) -> pa.DataType:
    if function == "approx_top_k":  # of its state struct
        return approx_top_k_type(value_type)
    if function in VECTOR_FUNCTIONS:  # of its (value, count)
        return vector_type(value_type)
    if function == "approx_count_distinct":
        return pa.int64()
    if function in ("avg", "percentile_approx", "histogram_numeric", *EXACT_PERCENTILES):  # of the typed null after
        return schema.field(f"_r{index}").type
    if function in MODE_FUNCTIONS:
        return value_type.value_type  # of the list of the group's values
    if function in TOP_K_FUNCTIONS:  # of the list of {v, o} pairs
        return pa.list_(value_type.value_type.field("v").type)
    return value_type


def histogram_type(dtype: T.DataType) -> T.DataType:
    """histogram_numeric's result type: its bins, each centre of the input's type and a double height."""
    bin_type = T.StructType([T.StructField("x", dtype), T.StructField("y", T.DoubleType())])
    return T.ArrayType(bin_type, containsNull=True)


def exact_result_type(percentiles: Percentiles) -> T.DataType:
    """An exact percentile's result type: a double, or an array of them."""
    return T.ArrayType(T.DoubleType(), containsNull=False) if percentiles.array else T.DoubleType()


def _digits(value: Decimal) -> int:
    """Digits left of the point."""
    return max(0, value.adjusted() + 1) if value else 0


def _registers(hashes: list[int]) -> bytes:
    """HyperLogLog registers of 64-bit hashes, as Spark's HyperLogLog++ sets them."""
    registers = np.zeros(1 << HLL_PRECISION, np.uint8)
    if hashes:
        h = np.array(hashes, np.int64).view(np.uint64)
        index = (h >> np.uint64(64 - HLL_PRECISION)).astype(np.int64)
        w = (h << np.uint64(HLL_PRECISION)) | np.uint64(1 << (HLL_PRECISION - 1))
        rho = (_leading_zeros(w) + 1).astype(np.uint8)
        np.maximum.at(registers, index, rho)
    return registers.tobytes()


def _leading_zeros(w: np.ndarray) -> np.ndarray:
    zeros = np.zeros(len(w), np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        empty = (w >> np.uint64(64 - shift)) == 0
        zeros += np.where(empty, shift, 0)
        w = np.where(empty, w << np.uint64(shift), w)
    return zeros + ((w >> np.uint64(63)) == 0)


def _estimate(registers: bytes) -> int:
    """HyperLogLog's estimate: Spark's linear counting while registers are empty and it is below Spark's threshold
    (so small counts equal Spark's); then linear counting up to 2.5 times the registers (HyperLogLog's small-range
    correction, where Spark uses its bias table), the raw estimate above."""
    m = 1 << HLL_PRECISION
    values = np.frombuffer(registers, np.uint8).astype(np.float64)
    empty = int((values == 0).sum())
    alpha = 0.7213 / (1 + 1.079 / m)
    raw = alpha * m * m / float(np.sum(2.0**-values))
    if empty:
        linear = m * math.log(m / empty)
        if linear <= HLL_LINEAR_LIMIT or raw <= 2.5 * m:
            return round(linear)
    return round(raw)
