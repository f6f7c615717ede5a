"""Hint extraction: a batch's distinct state keys, computed by Spark one stage before the stateful one.

:func:`hint_frame` adds a ``mapInArrow`` transform to a DataFrame; each partition yields its distinct
state keys (for windowed state: distinct (window end, key) pairs, with Spark's window semantics)
with their latest event time, row count, key hash and whether a Count-Min sketch snapshot finds the
key hot. The driver collects these rows, counts them into the sketch and prefetches the keys that
are not hot.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from .sketch import CountMinSketch, hash_keys

HINT_WINDOW_END = "_window_end_us"  # int64: end of the key's window (windowed specs only)
HINT_TS = "_hint_ts_us"  # int64: max event time (us) of the key's rows in the partition
HINT_COUNT = "_hint_count"  # int64: rows of the key in the partition
HINT_HASH = "_hint_hash"  # int64 view of the uint64 hash of the key columns (window excluded)
HINT_HOT = "_hint_hot"  # bool: hot in the sketch snapshot (emitted, but not to be prefetched)

MAX_ROWS_PER_BATCH = 65536
_BUCKET, _SHORT = "_hint_bucket_us", "_hint_short"  # internal pre-aggregation columns


@dataclass(frozen=True)
class HintSpec:
    """The state key: ``key_columns`` (none: one key, or one per window), and for windowed state the event time and
    window sizes."""

    key_columns: tuple[str, ...]
    event_time: str | None = None  # a timestamp column, or integers of epoch ms; None: no event time (ts 0)
    window_us: int | None = None  # window size; None: unwindowed state
    slide_us: int | None = None  # None: tumbling windows

    def __post_init__(self) -> None:
        object.__setattr__(self, "key_columns", tuple(self.key_columns))
        if self.window_us is not None:
            if self.window_us <= 0:
                raise ValueError(f"window_us must be positive, not {self.window_us}")
            if self.event_time is None:
                raise ValueError("event_time is required for windowed state (window_us is set)")
        if self.slide_us is not None:
            if self.window_us is None:
                raise ValueError("slide_us needs window_us")
            if not 0 < self.slide_us <= self.window_us:
                raise ValueError(f"slide_us must be in (0, window_us={self.window_us}], not {self.slide_us}")

    @property
    def windowed(self) -> bool:
        return self.window_us is not None

    @property
    def slide(self) -> int:
        """The window slide in microseconds (the window size for tumbling windows)."""
        return self.slide_us or self.window_us  # type: ignore[return-value]

    @property
    def input_columns(self) -> list[str]:
        """The columns hint extraction reads."""
        return list(dict.fromkeys([*self.key_columns, *([self.event_time] if self.event_time else [])]))


def no_hints() -> tuple[list[bytes], np.ndarray]:
    """What an operator's ``hint_keys`` returns when the rows name no key it will read."""
    return [], np.zeros(0, np.int64)


def validate(spec: HintSpec, df_schema: StructType) -> None:
    """Raise ValueError if a column of ``spec`` is missing from ``df_schema`` or the event time is neither a
    timestamp nor an integer (epoch milliseconds)."""
    names = set(df_schema.fieldNames())
    for column in spec.input_columns:
        if column not in names:
            raise ValueError(f"hint column {column!r} is not in the DataFrame (columns: {sorted(names)})")
    times = (TimestampType, TimestampNTZType, LongType, IntegerType)
    if spec.event_time and not isinstance(df_schema[spec.event_time].dataType, times):
        raise ValueError(
            f"event_time column {spec.event_time!r} must be a timestamp or an integer of epoch milliseconds, "
            f"not {df_schema[spec.event_time].dataType.simpleString()}"
        )


def hint_schema(df_schema: StructType, spec: HintSpec) -> StructType:
    """The schema of the hint rows: [window end], key columns (types of ``df_schema``), ts, count, hash, hot."""
    window = [StructField(HINT_WINDOW_END, LongType())] if spec.windowed else []
    keys = [df_schema[c] for c in spec.key_columns]
    measures = [
        StructField(HINT_TS, LongType()),
        StructField(HINT_COUNT, LongType()),
        StructField(HINT_HASH, LongType()),
        StructField(HINT_HOT, BooleanType()),
    ]
    return StructType(window + keys + measures)


def hint_arrow_schema(rows: pa.Schema, spec: HintSpec) -> pa.Schema:
    """:func:`hint_schema` for hint rows extracted on the driver from Arrow ``rows``."""
    return to_arrow_schema(hint_schema(from_arrow_schema(rows), spec))


def hint_frame(df: DataFrame, spec: HintSpec, sketch: CountMinSketch | None) -> DataFrame:
    """The hint rows of ``df``, one per partition and distinct key, with hot keys flagged by a snapshot of
    ``sketch``."""
    validate(spec, df.schema)
    snapshot = sketch.copy() if sketch is not None else None
    columns = spec.input_columns or [F.lit(True).alias("_hint_row")]  # Spark's batches of no columns count no rows
    return df.select(*columns).mapInArrow(
        partial(extract_partition, spec=spec, sketch=snapshot), hint_schema(df.schema, spec)
    )


def extract_partition(
    batches: Iterator[pa.RecordBatch], spec: HintSpec, sketch: CountMinSketch | None
) -> Iterator[pa.RecordBatch]:
    """The distinct keys of one partition's ``batches`` (the ``mapInArrow`` function of :func:`hint_frame`).

    Each batch is pre-aggregated on its own; the partials are merged once all batches are read.
    Windowed specs drop rows without event time (as Spark's ``window`` does); null keys are a group.
    """
    keys = list(spec.key_columns)
    groups = keys + ([_BUCKET, _SHORT] if spec.windowed else [])
    partials = [_aggregate(_rows(batch, spec), groups) for batch in batches]
    if not partials:
        return
    table = _aggregate(pa.concat_tables(partials), groups)
    if spec.windowed:
        table = _aggregate(_assign_windows(table, spec), [HINT_WINDOW_END, *keys])
    hashes = hash_keys([table[c] for c in keys], table.num_rows)
    hot = sketch.is_hot(hashes) if sketch is not None else np.zeros(len(hashes), bool)
    out = table.select(([HINT_WINDOW_END] if spec.windowed else []) + keys)
    for name, column in (
        (HINT_TS, table[HINT_TS].fill_null(0)),
        (HINT_COUNT, table[HINT_COUNT]),
        (HINT_HASH, pa.array(hashes.view(np.int64))),
        (HINT_HOT, pa.array(hot)),
    ):
        out = out.append_column(name, column)
    yield from out.to_batches(max_chunksize=MAX_ROWS_PER_BATCH)


def key_counts(hints: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """What the Count-Min sketch counts of hint rows: each key's hash (uint64) and its records (a key's windows
    overlap: the largest window's)."""
    if not hints.num_rows:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    by_window = [HINT_HASH] + ([HINT_WINDOW_END] if HINT_WINDOW_END in hints.column_names else [])
    return _largest_per_key(hints.group_by(by_window).aggregate([(HINT_COUNT, "sum")]), f"{HINT_COUNT}_sum")


def merged_key_counts(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`key_counts` of hint rows split in ``parts`` by key (a key's windows in one part or several)."""
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    hashes = np.concatenate([h for h, _ in parts]).view(np.int64)
    counts = np.concatenate([c for _, c in parts])
    return _largest_per_key(pa.table({HINT_HASH: hashes, HINT_COUNT: counts}), HINT_COUNT)


def _largest_per_key(table: pa.Table, count: str) -> tuple[np.ndarray, np.ndarray]:
    per_key = table.group_by(HINT_HASH).aggregate([(count, "max")])
    return per_key[HINT_HASH].to_numpy().view(np.uint64), per_key[f"{count}_max"].to_numpy()


def _rows(batch: pa.RecordBatch, spec: HintSpec) -> pa.Table:
    """Key columns, event time in us (HINT_TS) and a count of 1 per row; for windows also the row's
    slide bucket and whether it falls in the bucket's short head (see :func:`_assign_windows`)."""
    table = pa.Table.from_batches([batch]).select(list(spec.key_columns))
    if spec.event_time is None:
        ts = pa.nulls(batch.num_rows, pa.int64())
    else:
        column = batch.column(spec.event_time)
        if pa.types.is_integer(column.type):  # epoch milliseconds
            ts = pc.multiply(column.cast(pa.int64()), 1000)
        else:
            ts = column.cast(pa.timestamp("us", column.type.tz)).cast(pa.int64())
    table = table.append_column(HINT_TS, ts).append_column(HINT_COUNT, pa.array(np.ones(batch.num_rows, np.int64)))
    if not spec.windowed:
        return table
    table = table.filter(pc.is_valid(table[HINT_TS]))
    t = table[HINT_TS].to_numpy()
    bucket = t // spec.slide * spec.slide
    return table.append_column(_BUCKET, pa.array(bucket)).append_column(
        _SHORT, pa.array(t - bucket < spec.window_us % spec.slide)
    )


def _aggregate(table: pa.Table, groups: list[str]) -> pa.Table:
    """One row per distinct ``groups`` with the max of HINT_TS and the sum of HINT_COUNT."""
    result = table.group_by(groups, use_threads=False).aggregate([(HINT_TS, "max"), (HINT_COUNT, "sum")])
    return result.rename_columns({f"{HINT_TS}_max": HINT_TS, f"{HINT_COUNT}_sum": HINT_COUNT})


def _assign_windows(table: pa.Table, spec: HintSpec) -> pa.Table:
    """Expand each row to every window containing it, adding HINT_WINDOW_END.

    Windows start at multiples of the slide and a row at t is in [start, start + size) iff
    start = bucket - k*slide (bucket = floor(t / slide) * slide) and start + size > t, k < ceil(size / slide).
    With size = q*slide + r the last candidate (k = q) holds only when t - bucket < r, which is why rows
    were grouped by that flag too: all rows of a group belong to the same windows, so the group's
    max event time decides for all of them.
    """
    size, slide = spec.window_us, spec.slide
    per_row = -(-size // slide)
    bucket, ts = table[_BUCKET].to_numpy(), table[HINT_TS].to_numpy()
    rows = np.repeat(np.arange(table.num_rows), per_row)
    starts = bucket[rows] - np.tile(np.arange(per_row), table.num_rows) * slide
    inside = starts + size > ts[rows]
    expanded = table.take(pa.array(rows[inside])).drop_columns([_BUCKET, _SHORT])
    return expanded.append_column(HINT_WINDOW_END, pa.array(starts[inside] + size))
