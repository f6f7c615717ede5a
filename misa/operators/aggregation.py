"""Stateful operators: the Spark part builds per-key deltas, the driver part merges them into state.

:class:`Aggregation` covers windowed aggregation (tumbling or sliding event-time windows with a
watermark, update or append output) and continuous (unwindowed) aggregation, with sum, count,
avg, min, max, count_if, bool_and, bool_or, bit_and, bit_or, bit_xor, product, the moment functions
(:mod:`.moments`) and the object aggregates (:mod:`.object_aggs`) over any integer or string group columns. Its
semantics follow Spark's own streaming aggregation, so that ``--mode native`` is an exact reference:

* the watermark of batch v is ``max event time (ms) of batches < v - delay``; it starts at 0;
* a (window, key) update whose window ends at or before the watermark is late: dropped and counted;
* windows ending at or before the watermark are evicted (append mode emits them first, once).

Windows are closed at the end of the batch that advances the watermark, which is when Spark's
next (possibly no-data) batch would close them: the results are the same.

So is Spark's arithmetic, whatever the batch boundaries: the output types are Spark's (sum of
integers: bigint, of floats: double; avg: double; count: bigint; min and max: the input's type);
integer sums, mins and maxes are kept exactly in int64, and integer sums wrap around on overflow
or, under ``spark.sql.ansi.enabled`` (read from the batch's session), fail as Spark's do; NaN
ranks above every double (min skips it unless all are NaN, max is NaN if one is). Inputs misa
cannot aggregate exactly (decimals; strings for min and max) are refused at the first batch.

Tumbling windows are stored per (window, key); sliding windows as panes of one slide
(:mod:`misa.operators.sliding`): Spark pre-aggregates each event into its one pane, and a window's
value is combined from its panes when it is emitted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from misa.config_forms import parse_seconds
from misa.exceptions import AnalysisError
from misa.operators.base import (
    DEFAULT_STORE,
    MAX_EVENT,
    PANE_END,
    ROWS,
    WINDOW_END,
    WINDOW_START,
    HintSource,
    KeyPartitioned,
    MemoryResident,
    OperatorResult,
    StateReadable,
    StateStoreSpec,
    max_event_measures,
    micros,
    observe_deltas,
    spark_interval,
    state_table,
)
from misa.operators.mode import MODE_FUNCTIONS
from misa.operators.moments import (
    CO_MOMENT_FUNCTIONS,
    MOMENT_FUNCTIONS,
    moment_count,
    moment_fold,
    moment_partials,
    moment_results,
)
from misa.operators.object_aggs import (
    BY_FUNCTIONS,
    MERGE_ORDERED,
    OBJECT_FUNCTIONS,
    OBJECT_ORDERED,
    ObjectValues,
    is_object,
    merge_ordered,
    object_partial,
)
from misa.operators.pane_objects import PaneObjects
from misa.operators.pane_order import ORDER_FUNCTIONS, PLACE, order_partial, place_column
from misa.operators.panes import PaneWindows, record_keys
from misa.operators.percentile import EXACT_PERCENTILES
from misa.operators.percentile_approx import PERCENTILE_TYPES, Percentiles
from misa.operators.schema import column_type, duration, event_time, key_columns, schema_from_text, schema_text, typed
from misa.operators.sketches import SKETCH_FUNCTIONS, TWO_COLUMN_SKETCHES, Sketch
from misa.operators.sliding import RECORDS_END, PaneState, Windows
from misa.operators.top_k_by import TOP_K_FUNCTIONS
from misa.operators.watermark import EventTimeWatermark, InputsWatermark, WatermarkInputs, inputs_signature
from misa.parallel.routing import KeyColumns
from misa.state.codec import AggStates, Fold, KeyCodec, distinct_keys, latest_per_key
from misa.state.keys import KEY_SPACE_VERSION, PANE_RECORD, WINDOW_PREFIX_BYTES, window_prefix
from misa.state.memory_tier import MemorySpace
from misa.state.moment_folds import EXTRA_CELLS
from misa.state.view import StateView
from prefetch.hints import HINT_TS, HINT_WINDOW_END, HintSpec, no_hints

BOOLEAN_FUNCTIONS = {"bool_and": "min", "bool_or": "max"}  # folded as Spark's replacements: min, max of booleans
BIT_FUNCTIONS = {"bit_and": "and", "bit_or": "or", "bit_xor": "xor"}  # folded bitwise, in the input's integer type
FOLDS = {**BOOLEAN_FUNCTIONS, **BIT_FUNCTIONS, "product": "product"}  # the functions folded otherwise than by name
AGG_FUNCTIONS = ("sum", "count", "avg", "min", "max", "count_if", *FOLDS)
AGG_FUNCTIONS += (*MOMENT_FUNCTIONS, *OBJECT_FUNCTIONS)
TWO_COLUMNS = (*CO_MOMENT_FUNCTIONS, *BY_FUNCTIONS, *TOP_K_FUNCTIONS, *TWO_COLUMN_SKETCHES)  # of a second column
ROWS_COLUMN = "*"  # count's column for Spark's count(*): every row counts
OUTPUT_MODES = ("update", "append", "complete")
NO_WATERMARK = -(1 << 62)  # the watermark of an aggregation that keeps every window (nothing is late or closes)
NEVER_US = (1 << 63) - 1  # the time of a group whose event time is null: the watermark never judges it
OUTPUT_WINDOW = ("window_start", "window_end")  # the output's window columns
INTEGERS = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
NUMBERS = (*INTEGERS, T.FloatType, T.DoubleType)
ORDERED = (*NUMBERS, T.DateType, T.TimestampType, T.TimestampNTZType)
# count, first, last, collect_list, collect_set and approx_count_distinct take any type
INPUT_TYPES = {"sum": (*NUMBERS, T.DecimalType), "avg": (*NUMBERS, T.DecimalType)}
INPUT_TYPES |= {"min": (*ORDERED, *OBJECT_ORDERED), "max": (*ORDERED, *OBJECT_ORDERED)}
INPUT_TYPES |= {f: (*NUMBERS, T.DecimalType) for f in MOMENT_FUNCTIONS}  # as doubles, as Spark casts them
INPUT_TYPES |= {f: (T.BooleanType,) for f in ("count_if", *BOOLEAN_FUNCTIONS)}
INPUT_TYPES |= {f: INTEGERS for f in BIT_FUNCTIONS}
INPUT_TYPES |= {"product": (*NUMBERS, T.DecimalType)}  # as doubles, as Spark casts them
# mode: of the types whose values misa counts with the equality of Spark's hash map (not binary, arrays, structs)
INPUT_TYPES |= {f: (*ORDERED, T.StringType, T.BooleanType, T.DecimalType) for f in MODE_FUNCTIONS}
INPUT_TYPES |= {"percentile_approx": PERCENTILE_TYPES, "histogram_numeric": PERCENTILE_TYPES}
INPUT_TYPES |= {f: (*NUMBERS, T.DecimalType) for f in EXACT_PERCENTILES}  # Spark's but for intervals
# The state layout, stored with each version: aggregate values as AggStates cells (int64 or float64, count).
KEY_LAYOUT, PANE_LAYOUT = "keys-v2", "panes-v2"
DELTA_SCHEMA = "delta_schema"  # metadata: the deltas' Arrow schema (misa.operators.schema.schema_text)
log = logging.getLogger(__name__)
LAYOUTS = {KEY_LAYOUT: "one entry per (window, key)", PANE_LAYOUT: "sliding windows as panes"}


@dataclass(frozen=True)
class Agg:
    """One output column: ``function`` of input ``column`` (count: ``"*"`` counts rows, Spark's ``count(*)``) and,
    for the functions of two columns (:data:`TWO_COLUMNS`), ``other``: covariance's and correlation's y, max_by's
    and min_by's (max_by_k's, min_by_k's) ordering, a tuple sketch's summary.

    Functions: sum, count, avg, min, max, count_if, bool_and, bool_or, bit_and, bit_or, bit_xor, product,
    (:mod:`misa.operators.moments`)
    stddev_samp, stddev_pop, var_samp, var_pop, skewness, kurtosis, covar_pop, covar_samp, corr, and
    (:mod:`misa.operators.object_aggs`) first, last, collect_list, collect_set, collect_union, approx_count_distinct,
    max_by, min_by, mode, mode_highest, percentile_approx (``percentiles``: its percentages and accuracy,
    :mod:`misa.operators.percentile_approx`), percentile, percentile_desc, percentile_disc, percentile_disc_desc
    (``percentiles``: its percentages, :mod:`misa.operators.percentile`), histogram_numeric (``bins``: its number of
    bins, :mod:`misa.operators.histogram`; not over sliding windows), max_by_k and min_by_k (``k``: how many values,
    :mod:`misa.operators.top_k_by`), and Spark's sketch aggregates (``sketch``: its constants,
    :mod:`misa.operators.sketches`)."""

    name: str
    function: str
    column: str
    other: str = ""
    percentiles: Percentiles | None = None
    bins: int | None = None
    sketch: Sketch | None = None
    k: int | None = None  # max_by_k's, min_by_k's: how many values

    def __post_init__(self) -> None:
        if self.function not in AGG_FUNCTIONS:
            raise ValueError(f"aggregate {self.name}: unknown function {self.function!r}; use one of {AGG_FUNCTIONS}")
        if self.column == ROWS_COLUMN and self.function != "count":
            raise ValueError(f'aggregate {self.name}: "*" is count\'s column only (count(*)); name a column')
        if bool(self.other) != (self.function in TWO_COLUMNS):
            raise ValueError(f"aggregate {self.name}: other (a second column) is for {', '.join(TWO_COLUMNS)} only")
        if (self.percentiles is not None) != (self.function in ("percentile_approx", *EXACT_PERCENTILES)):
            raise ValueError(
                f"aggregate {self.name}: percentiles (its percentages) are percentile_approx's and "
                f"{', '.join(EXACT_PERCENTILES)}'s only"
            )
        if (self.bins is not None) != (self.function == "histogram_numeric"):
            raise ValueError(f"aggregate {self.name}: bins (at least 2) is histogram_numeric's, and it needs them")
        if (self.sketch is not None) != (self.function in SKETCH_FUNCTIONS) or (
            self.sketch is not None and self.sketch.function != self.function
        ):
            raise ValueError(f"aggregate {self.name}: a sketch (its constants) is {self.function}'s, and it needs one")
        if (self.k is not None) != (self.function in TOP_K_FUNCTIONS) or self.k is not None and self.k < 1:
            raise ValueError(f"aggregate {self.name}: k (at least 1) is max_by_k's and min_by_k's, and they need it")
        if self.bins is not None and self.bins < 2:
            raise ValueError(f"aggregate {self.name}: histogram_numeric needs at least 2 bins, not {self.bins}")

    def __str__(self) -> str:
        other = f', other="{self.other}"' if self.other else ""
        percentiles = f", percentiles={self.percentiles!r}" if self.percentiles else ""
        bins = f", bins={self.bins}" if self.bins else ""
        sketch = f", sketch={self.sketch!r}" if self.sketch else ""
        k = f", k={self.k}" if self.k else ""
        return f'Agg("{self.name}", "{self.function}", "{self.column}"{other}{percentiles}{bins}{sketch}{k})'

    def signature(self, schema: T.StructType) -> str:
        """This aggregate in a state's signature, its input columns checked against ``schema``."""
        if self.column == ROWS_COLUMN:
            return f"{self.name}=count(*)"
        dtype = column_type(schema, self.column, str(self))
        self.check_input(dtype)
        arguments = [typed(self.column, dtype)]
        if self.other:
            other = column_type(schema, self.other, str(self))
            self.check_other(other)
            arguments.append(typed(self.other, other))
        if self.percentiles is not None:
            arguments.append(str(self.percentiles))
        if self.bins is not None:
            arguments.append(str(self.bins))
        if self.sketch is not None and self.sketch.constants:
            arguments.append(str(self.sketch))
        if self.k is not None:
            arguments.append(str(self.k))
        return f"{self.name}={self.function}({', '.join(arguments)})"

    def check_other(self, dtype: T.DataType) -> None:
        """Refuse a second column misa cannot compute with (covariance and correlation: numbers; max_by_k's and
        min_by_k's ordering: no struct, array or map)."""
        if self.function in CO_MOMENT_FUNCTIONS:
            replace(self, function="var_pop", other="").check_input(dtype)
        if self.function in TOP_K_FUNCTIONS and isinstance(dtype, (T.StructType, T.ArrayType, T.MapType)):
            raise AnalysisError(
                f"[DATATYPE_MISMATCH] aggregate {self.name}: {self.function} ordered by column {self.other} of type "
                f"{dtype.simpleString()} is not supported; misa orders max_by(x, y, k) and min_by(x, y, k) by "
                "numbers, strings, booleans, binary values, decimals, dates and timestamps: order by one of them"
            )

    def check_input(self, dtype: T.DataType) -> None:
        """Refuse an input type whose aggregate misa cannot compute exactly as Spark does."""
        supported = INPUT_TYPES.get(self.function)
        if supported is not None and not isinstance(dtype, supported):
            names = ", ".join("decimal" if t is T.DecimalType else t().simpleString() for t in supported)
            raise AnalysisError(
                f"[DATATYPE_MISMATCH] aggregate {self.name}: {self.function} of column {self.column} of type "
                f"{dtype.simpleString()} is not supported; misa computes {self.function} exactly over {names} "
                "only: cast the column to one of them in the upstream"
            )

    def partials(self, index: int, dtype: T.DataType | None, place: Column | None = None) -> list[Column]:
        """The delta columns of this aggregate (number ``index``) over a group of rows of input type ``dtype``:
        ``_v{index}`` (vectorized; moments: the mean, then the further cells ``_m{index}``, ``_m{index}_1``, ...)
        or ``_o{index}`` (and ``_r{index}``; :mod:`.object_aggs`), then ``_c{index}``. ``place``: each row's place
        in the batch, which a pane's first, last and collect functions keep (:mod:`.pane_order`)."""
        other = F.col(self.other) if self.other else None
        if place is not None and self.function in ORDER_FUNCTIONS:
            columns = order_partial(self.function, F.col(self.column), place)
            named = [c.alias(f"{prefix}{index}") for c, prefix in zip(columns, ("_o", "_r"))]
        elif is_object(self.function, dtype):
            assert dtype is not None
            constants = self.percentiles, self.sketch, self.k
            columns = object_partial(self.function, F.col(self.column), dtype, other, *constants)
            named = [c.alias(f"{prefix}{index}") for c, prefix in zip(columns, ("_o", "_r"))]
        elif self.function in MOMENT_FUNCTIONS:
            mean, *cells = moment_partials(self.function, F.col(self.column), other)
            named = [mean.alias(f"_v{index}"), *(c.alias(moment_cell(index, j)) for j, c in enumerate(cells))]
            return [*named, moment_count(self.function, F.col(self.column), other).alias(f"_c{index}")]
        else:
            named = [self.partial().alias(f"_v{index}")]
        return [*named, self.partial_count().alias(f"_c{index}")]

    def row_partials(self, index: int, dtype: T.DataType | None) -> list[Column] | None:
        """The same delta columns as :meth:`partials` over one row, without grouping (sum, count, avg, min and max of
        numbers and times); None for the aggregates whose partial only a group of rows gives (object aggregates,
        moments, count_if, bool_and, bool_or)."""
        if is_object(self.function, dtype) or self.function not in ("sum", "count", "avg", "min", "max"):
            return None
        column = F.lit(1) if self.column == ROWS_COLUMN else F.col(self.column)
        value = column  # min and max: the value itself, of the input type
        if self.function == "count":
            value = column.isNotNull().cast("bigint")
        elif self.function == "avg" or self.function == "sum" and isinstance(dtype, (T.FloatType, T.DoubleType)):
            value = column.cast("double")
        elif self.function == "sum":
            value = column.cast("bigint")
        return [value.alias(f"_v{index}"), column.isNotNull().cast("bigint").alias(f"_c{index}")]

    def partial(self) -> Column:
        """This aggregate's partial value over a group of rows, in Spark's result type (avg: the double sum)."""
        column = F.lit(1) if self.column == ROWS_COLUMN else F.col(self.column)
        if self.function == "avg":
            return F.sum(column.cast("double"))
        if self.function == "count_if":
            return F.count_if(column)
        if self.function in BOOLEAN_FUNCTIONS:
            column = column.cast("bigint")
        function = BOOLEAN_FUNCTIONS.get(self.function, self.function)
        partials = {"sum": F.sum, "count": F.count, "min": F.min, "max": F.max}
        partials |= {"bit_and": F.bit_and, "bit_or": F.bit_or, "bit_xor": F.bit_xor, "product": F.product}
        return partials[function](column)

    def partial_count(self) -> Column:
        """How many non-null inputs this aggregate saw in a group of rows."""
        return F.count(F.lit(1) if self.column == ROWS_COLUMN else F.col(self.column))

    def fold(self, value_type: pa.DataType) -> Fold:
        """How partial values of ``value_type`` (the Arrow type of :meth:`partial`) combine."""
        if self.function in MOMENT_FUNCTIONS:
            return Fold(self.name, moment_fold(self.function), floating=True)
        op = FOLDS.get(self.function, self.function)
        op = op if op in ("min", "max", *FOLDS.values()) else "sum"
        return Fold(self.name, op, pa.types.is_floating(value_type))


@dataclass(frozen=True)
class AggValues:
    """The aggregates' partial values as the deltas carry them: their states and output types.

    Delta column ``_v{i}`` holds vectorized aggregate i's partial value in Spark's result type, ``_c{i}`` its
    count of non-null inputs; the other aggregates are ``objects`` (:mod:`.object_aggs`). A state value is
    the vectorized cells, then (with object aggregates) their pickled states.
    """

    aggs: Sequence[Agg]  # the vectorized ones
    indexes: tuple[int, ...]  # their positions among all aggregates (their delta columns' numbers)
    types: tuple[pa.DataType, ...]
    states: AggStates
    objects: ObjectValues
    names: tuple[str, ...]  # every aggregate's output name, in order

    @classmethod
    def of(cls, aggs: Sequence[Agg], schema: pa.Schema, ansi: bool, collect_limit: int) -> AggValues:
        indexes = tuple(i for i in range(len(aggs)) if f"_v{i}" in schema.names)
        types = tuple(schema.field(f"_v{i}").type for i in indexes)
        vectorized = [aggs[i] for i in indexes]
        for agg, t in zip(vectorized, types):
            if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)):
                raise TypeError(f"aggregate {agg.name}: partial values of type {t} cannot be kept exactly")
        names = [(i, a.name, a.function, a.percentiles, a.bins, a.sketch, a.k) for i, a in enumerate(aggs)]
        objects = ObjectValues.of(names, schema, ansi, collect_limit)
        folds = AggStates(tuple(a.fold(t) for a, t in zip(vectorized, types)), ansi)
        return cls(vectorized, indexes, types, folds, objects, tuple(a.name for a in aggs))

    def decode(self, values: Sequence[bytes | None]) -> tuple[np.ndarray, list[list[Any]]]:
        """Stored values (None: no state yet) as vectorized states and object states."""
        width = self.states.width * 8
        cells = self.states.decode([v[:width] if v is not None else None for v in values])
        objects = self.objects.decode([v[width:] if v is not None else None for v in values]) if self.objects else []
        return cells, objects

    def encode(self, states: np.ndarray, objects: list[list[Any]]) -> list[bytes]:
        cells = self.states.encode(states)
        return [c + o for c, o in zip(cells, self.objects.encode(objects))] if self.objects else cells

    def delta_objects(self, deltas: pa.Table, key_of_row: np.ndarray, keys: int) -> list[list[Any]]:
        """The deltas' object states folded per key (rows in order)."""
        if not self.objects:
            return []
        return self.objects.per_key(self.objects.delta_states(deltas), key_of_row, keys)

    def merge_objects(self, old: list[list[Any]], delta: list[list[Any]]) -> list[list[Any]]:
        return self.objects.merge(old, delta) if self.objects else []

    @property
    def cells(self) -> list[str]:
        """The kind of each aggregate's value cell, stored with each version."""
        return [f.op if f.op in EXTRA_CELLS else "float64" if f.floating else "int64" for f in self.states.folds]

    def delta_states(self, deltas: pa.Table) -> np.ndarray:
        """The deltas' states: per aggregate its partial value (null: the identity) and count (and moments)."""
        columns = []
        for i, fold, t in zip(self.indexes, self.states.folds, self.types):
            value = deltas[f"_v{i}"].combine_chunks()
            if fold.floating:
                cells = _float_cells(value, fold.identity)
            else:
                cells = value.view(_integers(t)).cast(pa.int64()).fill_null(fold.identity).to_numpy()
            columns += [cells, deltas[f"_c{i}"].to_numpy().astype(np.int64)]
            for j in range(EXTRA_CELLS.get(fold.op, 0)):
                columns.append(_float_cells(deltas[moment_cell(i, j)].combine_chunks(), 0.0))
        return np.column_stack(columns) if columns else self.states.identity(deltas.num_rows)

    def columns(self, states: np.ndarray, objects: list[list[Any]]) -> dict[str, pa.Array]:
        """The output columns of ``states``: null where an aggregate saw no non-null input (count: 0)."""
        out = self.objects.columns(objects) if self.objects else {}
        for i, (agg, t) in enumerate(zip(self.aggs, self.types)):
            value, count = self.states.value(states, i), self.states.count(states, i)
            empty = None if agg.function in ("count", "count_if") else count == 0
            if agg.function == "avg":
                value = value / np.maximum(count, 1)
            elif agg.function in MOMENT_FUNCTIONS:
                value, empty = moment_results(agg.function, count, value, self.states.moments(states, i))
            if agg.function in BOOLEAN_FUNCTIONS:
                out[agg.name] = pa.array(value != 0, mask=empty)
            elif pa.types.is_floating(t):
                out[agg.name] = pa.array(value, mask=empty).cast(t)
            else:
                out[agg.name] = pa.array(value, mask=empty).cast(_integers(t)).view(t)
        return {name: out[name] for name in self.names}


def moment_cell(index: int, cell: int) -> str:
    """The delta column of aggregate ``index``'s moment cell ``cell`` (after the mean and the count)."""
    return f"_m{index}" + (f"_{cell}" if cell else "")


def _float_cells(values: pa.Array, identity: float) -> np.ndarray:
    """Float partial values as state cells (their float64 bits; null: ``identity``)."""
    return values.cast(pa.float64()).fill_null(identity).to_numpy().view(np.int64)


def _integers(t: pa.DataType) -> pa.DataType:
    """The integer type with the bits of ``t`` (dates and timestamps count days or time units)."""
    return {32: pa.int32(), 64: pa.int64()}[t.bit_width] if pa.types.is_temporal(t) else t


@dataclass
class Aggregation(HintSource, KeyPartitioned, StateReadable, MemoryResident):
    """Grouped aggregation, windowed when ``window`` is given (``slide`` defaults to ``window``). Without a window,
    ``event_time`` among ``group_by`` makes each group's time its instant: the watermark drops rows at or before it
    and evicts such groups (append output emits them), as Spark's aggregation judges an event-time key."""

    group_by: Sequence[str]
    aggs: Sequence[Agg]
    event_time: str | None = None  # a timestamp column; required for windows
    window: str | None = None
    slide: str | None = None
    watermark_delay: str | None = "0s"  # None: no watermark (windows are kept forever, nothing is late)
    output_mode: str = "update"  # update, append or complete (every group's row, each batch)
    start_time: str | None = None  # Spark's window startTime: windows start at it plus multiples of slide
    collect_max_items: int = 10_000  # collect_list / collect_set: items per group (more fails the batch)
    watermark_inputs: WatermarkInputs | None = None  # a union of watermarked streams: Spark's global watermark
    where: str | None = None  # Spark's filter on the event time after withWatermark (SQL; see deltas)
    watermark: EventTimeWatermark | InputsWatermark = field(init=False)
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _panes: PaneState | None = field(default=None, init=False, repr=False)  # sliding windows only
    _ansi: bool = field(default=False, init=False, repr=False)  # the session's, read by deltas()
    _cells: list[str] | None = field(default=None, init=False, repr=False)  # AggValues.cells of the state
    _last_schema: pa.Schema | None = field(default=None, init=False, repr=False)  # the last deltas', for no_data_batch
    _batches: int = field(default=0, init=False, repr=False)  # data batches applied (stamps panes' object states)

    def __post_init__(self) -> None:
        if self.output_mode not in OUTPUT_MODES:
            raise ValueError(f"output mode {self.output_mode!r}: use one of {', '.join(OUTPUT_MODES)}")
        if self.window and not self.event_time:
            raise ValueError("a windowed aggregation needs event_time (a timestamp column)")
        if self.where and not self.window:
            raise ValueError("where: a filter on the event time needs windows (without, no watermark is kept)")
        if self.output_mode == "append" and not self.window and not self.time_keyed:
            raise ValueError(
                "append output needs windows, or the event time among the group columns, with a watermark (rows must "
                "be final when emitted)"
            )
        if self.output_mode == "append" and self.watermark_delay is None:
            raise ValueError(
                "append output needs a watermark: give watermark_delay (Spark's withWatermark delay, for example "
                '"10 seconds"), or use update or complete output'
            )
        if self.window and self.watermark_delay is None:
            log.warning(
                "a windowed aggregation without a watermark keeps every window of %r forever (as Spark does): its "
                "state grows without bound; give watermark_delay (Spark's withWatermark) to bound it",
                self.window,
            )
        names = [*(OUTPUT_WINDOW if self.window else ()), *self.group_by, *(a.name for a in self.aggs)]
        clashes = sorted({n for n in names if names.count(n) > 1})
        if clashes:
            raise ValueError(f"aggregation: output column names {clashes} clash; rename aggregates or group columns")
        self.delay_ms = int(parse_seconds(self.watermark_delay or "0s") * 1000)
        self.watermark = (
            self.watermark_inputs.watermark() if self.watermark_inputs else EventTimeWatermark(self.delay_ms)
        )
        size, slide = micros(self.window), micros(self.slide)
        self._start_us = (micros(self.start_time) or 0) % (slide or size or 1)
        if size and slide and slide != size:
            if not 0 < slide < size:
                raise ValueError(f"slide {self.slide!r} must be positive and at most the window {self.window!r}")
            if ordered := merge_ordered(self.aggs):
                raise ValueError(
                    f"{ordered} over sliding windows: Spark builds each window's {MERGE_ORDERED[ordered]} from its "
                    "rows, which misa's panes cannot merge into: tumbling windows instead"
                )
            windows = PaneWindows(size, slide, self._start_us)
            cells = sum(a.fold(pa.float64()).cells for a in self.aggs)  # a fold's cells do not depend on the type
            self._panes = PaneState(windows, cells, append=self.output_mode == "append")

    @property
    def time_keyed(self) -> bool:
        """Whether the groups' time is the event-time column among them (no window)."""
        return not self.window and bool(self.event_time) and self.event_time in self.group_by

    @property
    def _timed(self) -> bool:
        """Whether each state key starts with its time (a window's end, or an instant), which the watermark judges."""
        return bool(self.window) or self.time_keyed

    def _instants(self, table: pa.Table) -> pa.Array:
        """The microseconds of the event-time column of ``table``'s rows; a null time never closes (Spark's)."""
        column = table[self.event_time].combine_chunks()
        micros_type = pa.timestamp("us", tz=getattr(column.type, "tz", None))
        return pc.cast(pc.cast(column, micros_type), pa.int64()).fill_null(NEVER_US)

    # ------------------------------------------------------------------ at start
    def signature(self, schema: T.StructType) -> dict[str, Any]:
        """Resolve against the input's schema (each column must exist, with a type misa handles exactly);
        the signature of the state this aggregation keeps."""
        self._check_inputs(schema)
        aggregations = [agg.signature(schema) for agg in self.aggs]
        if self.event_time:
            event_time(schema, self.event_time, f"the aggregation's event_time {self.event_time!r}")
        signature = {
            "operator": "Aggregation",
            "group_columns": key_columns(schema, self.group_by, f"the aggregation's group_by {list(self.group_by)}"),
            "aggregations": aggregations,
            "window": duration(self.window),
            "slide": duration(self.slide or self.window),
            "lateness": duration(self.watermark_delay),
            "output_mode": self.output_mode,
            "state_layout": self._layout,
            "key_space": KEY_SPACE_VERSION,
        } | ({"start_time": duration(self.start_time)} if self._start_us else {})
        return signature | inputs_signature(self.watermark_inputs)

    # ------------------------------------------------------------------ Spark side
    def deltas(self, batch: DataFrame, group_by: Sequence[str] | None = None) -> DataFrame:
        """Per (window or pane, group) partial aggregates of the batch (columns: :class:`AggValues`).

        ``group_by``: other group columns than the aggregation's (a lookup aggregation's key). The input
        types are checked first, and the batch's session tells whether ANSI mode is on. With ``where``, the
        aggregates are of the rows it keeps, and one more row, of no rows (``ROWS`` 0), carries the whole batch's
        latest event time: the rows the filter drops count for the watermark, as Spark's watermark node sees them
        before its filter.
        """
        if self.where is None:
            return self._deltas(batch, group_by)
        assert self.event_time is not None
        latest = batch.agg(
            F.lit(0).cast("bigint").alias(ROWS), *max_event_measures(self.event_time, self.watermark_inputs)
        )
        return self._deltas(batch.where(self.where), group_by).unionByName(latest, allowMissingColumns=True)

    def _deltas(self, batch: DataFrame, group_by: Sequence[str] | None) -> DataFrame:
        """The partial aggregates of ``batch``'s rows (:meth:`deltas`)."""
        group_by = list(self.group_by if group_by is None else group_by)
        self._check_inputs(batch.schema)
        self._ansi = str(batch.sparkSession.conf.get("spark.sql.ansi.enabled")).lower() == "true"
        measures = [F.count(F.lit(1)).alias(ROWS)]
        if self.event_time:
            measures += max_event_measures(self.event_time, self.watermark_inputs)
        types = {f.name: f.dataType for f in batch.schema.fields}
        place = None
        if self._panes is not None and any(a.function in ORDER_FUNCTIONS for a in self.aggs):
            batch, place = batch.withColumn(PLACE, place_column()), F.col(PLACE)  # the rows' order, for panes
        for i, agg in enumerate(self.aggs):
            measures += agg.partials(i, types.get(agg.column), place)
        groups: list[Column] = [F.col(c) for c in group_by]
        if not self.window:
            return batch.groupBy(*groups).agg(*measures)  # an instant's time: from its column on the driver
        if self._panes is not None:  # each event into its one pane
            windows = self._panes.windows
            pane, start = f"{windows.pane_us} microseconds", f"{windows.pane_offset_us} microseconds"
            grouped = batch.groupBy(F.window(F.col(self.event_time), pane, pane, start).alias("_w"), *groups)
            grouped = grouped.agg(*measures)
            times = [F.unix_micros("_w.end").alias(PANE_END)]
        else:
            size = spark_interval(self.window)
            window = F.window(F.col(self.event_time), size, size, f"{self._start_us} microseconds")
            grouped = batch.groupBy(window.alias("_w"), *groups).agg(*measures)
            times = [F.unix_micros("_w.start").alias(WINDOW_START), F.unix_micros("_w.end").alias(WINDOW_END)]
        return grouped.select(*times, *group_by, *grouped.columns[1 + len(groups) :])

    def _check_inputs(self, schema: T.StructType) -> None:
        """Refuse the batch if an aggregate's input type is not supported exactly (:meth:`Agg.check_input`)."""
        types = {f.name: f.dataType for f in schema.fields}
        for agg in self.aggs:
            if agg.column in types:  # else Spark names the missing column
                agg.check_input(types[agg.column])
                if agg.other in types:
                    agg.check_other(types[agg.other])

    # ------------------------------------------------------------------ driver side
    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        """A data batch: rows of windows closed at the late-events watermark are dropped, the rest merged; then
        windows closed at the eviction watermark are evicted (append mode emits them) (:mod:`.watermark`)."""
        values = self._values(deltas.schema)
        self._batches += 1
        result = OperatorResult(self._empty_output(deltas.schema, values))
        late, evict = self.watermark.begin_batch()
        if not self._bounded:
            late = evict = NO_WATERMARK
        if deltas.num_rows and self.event_time:
            observe_deltas(self.watermark, self.watermark_inputs, deltas)
        if self.where is not None:  # without the row of the batch's latest event time (deltas)
            deltas = deltas.filter(pc.greater(deltas[ROWS], 0))
        if self._panes is not None:
            self._apply_panes(self._panes, deltas, state, result, values, late)
        else:
            self._apply_keys(deltas, state, result, values, late)
        self._evict(state, result, values, late, evict)
        if self.output_mode == "complete" and self._panes is not None:
            result.output = self._window_output(self._panes.every_window(state, values.states), values)
        elif self.output_mode == "complete":
            result.output = self._rows(state.scan(b"", PANE_RECORD), values)
        return result

    @property
    def _bounded(self) -> bool:
        """Whether the watermark drops late rows and closes windows (Spark: with a watermark, not in complete
        output, which keeps every group)."""
        return self.watermark_delay is not None and self.output_mode != "complete"

    def spark_runs_no_data_batches(self) -> bool:
        """Spark's aggregation runs batches without data in append and update output when the query's watermark
        reaches it (its ``shouldRunAnotherBatch``: an event time among its keys or not), not in complete output."""
        return self.output_mode != "complete" and self.watermark_delay is not None

    def partition_key_reader(self) -> KeyColumns:
        """A group's windows and panes live with the group: its columns pick the partition."""
        return KeyColumns(tuple(self.group_by))

    def event_watermark(self) -> EventTimeWatermark | InputsWatermark | None:
        return self.watermark if self.event_time else None

    def no_data_batch(self, state: StateView) -> OperatorResult:
        """The batch Spark runs without data when the trigger finds no new input: evict (and in append mode emit)
        the windows the batches so far closed. Without windows and group columns (a watermark elsewhere in the
        query), Spark's aggregation of no rows still gives its one group, and update output emits it."""
        if self._last_schema is None:
            return OperatorResult(pa.table({}))
        values = self._values(self._last_schema)
        if not self.window and not self.group_by:
            return OperatorResult(self._rows(state.scan(b"", PANE_RECORD), values))
        if not self._timed or not self._bounded:
            return OperatorResult(pa.table({}))
        result = OperatorResult(self._empty_output(self._last_schema, values))
        previous = self.watermark.at_us
        advanced = self.watermark.advance()
        if advanced is not None:
            self._evict(state, result, values, previous, advanced)
        return result

    def _values(self, schema: pa.Schema) -> AggValues:
        """The deltas' aggregate values; they must be kept as the state's are."""
        values = AggValues.of(self.aggs, schema, self._ansi, self.collect_max_items)
        if self._cells is not None and values.cells != self._cells:
            raise ValueError(
                f"the state holds aggregate values as {self._cells}, this batch's inputs give {values.cells} "
                "(an input column changed type): run the query from a new checkpoint location and state dir"
            )
        self._cells = values.cells
        self._last_schema = schema
        if self._panes is not None:
            self._panes.configure(values.states.width, PaneObjects(values.objects) if values.objects else None)
        return values

    def _apply_keys(
        self, deltas: pa.Table, state: StateView, result: OperatorResult, values: AggValues, late_us: int
    ) -> None:
        """Unwindowed and tumbling state: one entry per (window, key), merged with the key's deltas."""
        codec = self._key_codec(deltas.schema)
        if self._timed and deltas.num_rows:
            late = pc.less_equal(self._ends(deltas), late_us)
            result.late_rows = int(pc.sum(pc.filter(deltas[ROWS], late)).as_py() or 0)
            deltas = deltas.filter(pc.invert(late))
        if deltas.num_rows:
            ends = self._ends(deltas).to_numpy() if self._timed else None
            columns = [deltas[c].combine_chunks() for c in self.group_by]
            keys, key_of_row = distinct_keys(codec.encode(ends, columns, deltas.num_rows))
            delta, first_rows = values.states.per_key(values.delta_states(deltas), key_of_row, len(keys))
            ts: list[int] | int = 0
            if self.event_time:
                ts = latest_per_key(key_of_row, len(keys), deltas[MAX_EVENT].fill_null(0).to_numpy()).tolist()
            old, old_objects = values.decode(state.get_many(keys, ts))
            merged = values.states.merge(old, delta)
            objects = values.merge_objects(old_objects, values.delta_objects(deltas, key_of_row, len(keys)))
            state.put_many(keys, values.encode(merged, objects))
            result.state_reads = len(keys)
            if self.output_mode == "update":
                keys_table = deltas.select(self._key_columns()).take(first_rows)
                result.output = self._output(keys_table, values, merged, objects)

    def _rows(self, entries: list[tuple[bytes, bytes]], values: AggValues) -> pa.Table:
        """The output rows of state entries (window or group keys and their aggregate states)."""
        if not entries:
            return self._empty_output(self._last_schema, values) if self._last_schema else pa.table({})
        assert self._codec is not None
        ends, cols = self._codec.decode([k for k, _ in entries])
        window = self._window_columns(ends) if self.window else []
        keys = pa.table(dict(zip(self._key_columns(), window + cols)))
        return self._output(keys, values, *values.decode([v for _, v in entries]))

    def _apply_panes(
        self,
        panes: PaneState,
        deltas: pa.Table,
        state: StateView,
        result: OperatorResult,
        values: AggValues,
        watermark: int,
    ) -> None:
        """Sliding windows: drop pane deltas whose windows all closed at the late-events ``watermark`` (counting
        each late window's rows), fold the rest into the pane records, emit changed windows (update mode)."""
        codec = self._key_codec(deltas.schema)
        if deltas.num_rows:
            ends = deltas[PANE_END].to_numpy()
            late = panes.windows.late_windows(ends, watermark)
            result.late_rows = int((deltas[ROWS].to_numpy() * late).sum())
            deltas = deltas.filter(pa.array(panes.windows.last_window_end(ends) > watermark))
        if deltas.num_rows:
            group_keys = codec.encode(None, [deltas[c].combine_chunks() for c in self.group_by], deltas.num_rows)
            pane_ends, events = deltas[PANE_END].to_numpy(), deltas[MAX_EVENT].to_numpy()
            delta = values.delta_states(deltas)
            objects = None if panes.objects is None else panes.objects.delta_states(deltas, self._batches)
            changed = panes.merge(group_keys, pane_ends, delta, events, watermark, state, values.states, objects)
            result.state_reads = len(changed.group_keys)
            if self.output_mode == "update":
                result.output = self._window_output(changed, values)

    def _window_output(self, windows: Windows, values: AggValues) -> pa.Table:
        assert self._codec is not None
        _, columns = self._codec.decode(windows.group_keys)
        picked = [pc.take(c, pa.array(windows.keys)) for c in columns]
        keys = pa.table(dict(zip(self._key_columns(), self._window_columns(windows.ends) + picked)))
        objects = []
        if windows.objects is not None and self._panes is not None and self._panes.objects is not None:
            objects = self._panes.objects.plain(windows.objects)
        return self._output(keys, values, windows.states, objects)

    def _key_codec(self, schema: pa.Schema) -> KeyCodec:
        if self._codec is None:
            windowed = self._timed and self._panes is None  # pane records are keyed by the group alone
            self._codec = KeyCodec([schema.field(c) for c in self.group_by], windowed=windowed)
        return self._codec

    # ------------------------------------------------------------------ prefetch hints
    def hint_spec(self) -> HintSpec:
        """The state key's columns and windows (sliding: their panes), for hint extraction one stage early."""
        if self._panes is not None:
            pane = self._panes.windows.pane_us
            return HintSpec(tuple(self.group_by), self.event_time, pane, pane)
        return HintSpec(tuple(self.group_by), self.event_time, micros(self.window), micros(self.slide or self.window))

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        """State keys of hint rows, leaving out windows (panes) already closed (their rows will be late)."""
        if self._timed and hints.num_rows:
            ends = self._ends(hints, HINT_WINDOW_END)
            if self._panes is not None:
                ends = pa.array(self._panes.windows.last_window_end(ends.to_numpy()))
            hints = hints.filter(pc.greater(ends, self.watermark.at_us if self._bounded else NO_WATERMARK))
        if not hints.num_rows:
            return no_hints()
        codec = self._key_codec(hints.schema)
        columns = [hints[c].combine_chunks() for c in self.group_by]
        if self._panes is not None:
            return record_keys(codec.encode(None, columns, hints.num_rows)), hints[HINT_TS].to_numpy()
        ends = self._ends(hints, HINT_WINDOW_END).to_numpy() if self._timed else None
        return codec.encode(ends, columns, hints.num_rows), hints[HINT_TS].to_numpy()

    def due_keys(self, state: StateView, latest_event_us: int) -> tuple[list[bytes], np.ndarray]:
        """Sliding windows in append mode: the pane records whose windows close at the watermark events up to
        ``latest_event_us`` give (the next batch reads them to emit). Other windows are emitted by a range scan
        and update mode deletes closed records unread: no keys."""
        through = self.watermark.after(latest_event_us)
        if self._panes is None or through is None:
            return [], np.zeros(0, np.int64)
        return self._panes.due_records(state, self.watermark.at_us, through)

    def _evict(
        self, state: StateView, result: OperatorResult, values: AggValues, previous: int, watermark: int
    ) -> None:
        """Evict the windows that close as the watermark moves from ``previous`` to ``watermark``; append mode adds
        them to the batch's output."""
        if not self._timed or watermark <= previous:
            return
        if self._panes is not None:
            closed = self._panes.close(previous, watermark, state, values.states)
            if self.output_mode == "append" and len(closed.keys):
                self._add_closed(result, self._window_output(closed, values), len(closed.keys))
            return
        begin, end = window_prefix(0), window_prefix(watermark + 1)
        if self.output_mode == "append":
            closed = state.scan(begin, end)
            if closed:
                self._add_closed(result, self._rows(closed, values), len(closed))
        state.delete_range(begin, end)

    @staticmethod
    def _add_closed(result: OperatorResult, output: pa.Table, windows: int) -> None:
        result.output = pa.concat_tables([result.output, output.cast(result.output.schema)])
        result.closed_windows += windows

    def _ends(self, table: pa.Table, window_end: str = WINDOW_END) -> pa.Array:
        """The time the watermark judges each row's key by (deltas, or hints with ``window_end``): its window's end,
        or its instant."""
        return self._instants(table) if self.time_keyed else table[window_end].combine_chunks()

    def _window_columns(self, ends: np.ndarray) -> list[pa.Array]:
        size_us = micros(self.window) or 0
        return [pa.array(ends - size_us, pa.int64()), pa.array(ends, pa.int64())]

    def _key_columns(self) -> list[str]:
        return ([WINDOW_START, WINDOW_END] if self.window else []) + list(self.group_by)

    def _output(self, keys: pa.Table, values: AggValues, states: np.ndarray, objects: list[list[Any]]) -> pa.Table:
        columns: dict[str, pa.Array] = {}
        if self.window:
            for name, column in zip(OUTPUT_WINDOW, (WINDOW_START, WINDOW_END)):
                columns[name] = pc.cast(keys[column], pa.timestamp("us", tz="UTC"))
        for c in self.group_by:
            columns[c] = keys[c]
        return pa.table(columns | values.columns(states, objects))

    def _empty_output(self, schema: pa.Schema, values: AggValues) -> pa.Table:
        types = {WINDOW_START: pa.int64(), WINDOW_END: pa.int64()} | {c: schema.field(c).type for c in self.group_by}
        keys = pa.table({c: pa.array([], types[c]) for c in self._key_columns()})
        return self._output(keys, values, values.states.identity(0), [])

    def memory_spaces(self) -> list[MemorySpace]:
        """Tumbling windows' states, held per window (each batch reads and writes its open windows' groups, the
        watermark deletes closed windows whole); none for sliding windows (measured: a pane record is written as
        often as it is read) or without windows."""
        if not self._timed or self._panes is not None:
            return []
        return [MemorySpace(window_prefix(0), window_prefix(2**63), WINDOW_PREFIX_BYTES)]

    # ------------------------------------------------------------------ versions
    @property
    def _layout(self) -> str:
        """The state layout this aggregation writes (stored with each version)."""
        return PANE_LAYOUT if self._panes is not None else KEY_LAYOUT

    def metadata(self) -> dict[str, Any]:
        """Stored with each version: the watermark, the state layout, the kinds of aggregate values and the deltas'
        schema (a batch without data right after a restart, and a reader of the state, decode with it)."""
        schema = {DELTA_SCHEMA: schema_text(self._last_schema)} if self._last_schema is not None else {}
        batches = {"batches": self._batches} if self._panes is not None else {}
        return {**self.watermark.metadata(), "layout": self._layout, "values": self._cells} | schema | batches

    def restore(self, metadata: dict[str, Any]) -> None:
        """Resume from a version's metadata; a version of another state layout is refused, never misread."""
        if metadata and metadata.get("layout") != self._layout:
            found = metadata.get("layout") or "of an earlier release (float64 values)"
            raise ValueError(
                f"this checkpoint's aggregation state has layout {found}, this release reads {self._layout} "
                f"({LAYOUTS[self._layout]}, exact integer values): "
                "run the query from a new checkpoint location and state dir"
            )
        self._cells = metadata.get("values")
        self._batches = int(metadata.get("batches", 0))
        if DELTA_SCHEMA in metadata:
            self._last_schema, self._codec = schema_from_text(metadata[DELTA_SCHEMA]), None
            self._key_codec(self._last_schema)  # a batch without data right after a restart decodes keys with it
        self.watermark.restore(metadata)

    # ------------------------------------------------------------------ the state as rows
    def state_stores(self) -> list[StateStoreSpec]:
        """One store: a row per (window, group) as Spark's aggregation keeps it (sliding windows: combined from their
        panes), keyed by the window and the group columns, with each aggregate's value as the output shows it."""
        begin, end = (PANE_RECORD, RECORDS_END) if self._panes is not None else (b"", PANE_RECORD[:1])
        schema = self._last_schema
        rows = None if schema is None else self._state_table(self._empty_output(schema, self._values(schema)))
        return [StateStoreSpec.of(DEFAULT_STORE, begin, end, rows)]

    def state_rows(self, store: str, keys: list[bytes], values: list[bytes]) -> pa.Table:
        assert self._last_schema is not None, "state entries, but no deltas' schema to decode them with"
        aggs = self._values(self._last_schema)
        self._key_codec(self._last_schema)
        if self._panes is None:
            return self._state_table(self._rows(list(zip(keys, values)), aggs))
        after = self.watermark.at_us if self._bounded else None
        windows = self._panes.record_windows(keys, values, aggs.states, after)
        return self._state_table(self._window_output(windows, aggs))

    def _state_table(self, output: pa.Table) -> pa.Table:
        """Output rows as state rows: keyed by Spark's ``window`` struct and the group columns."""
        keys = {c: output[c] for c in self.group_by}
        if self.window:
            window = pa.StructArray.from_arrays([output[c].combine_chunks() for c in OUTPUT_WINDOW], ["start", "end"])
            keys = {"window": window} | keys
        return state_table(keys, {a.name: output[a.name] for a in self.aggs}, output.num_rows)
