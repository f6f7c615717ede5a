"""Stateful operators: the Spark part builds per-key deltas, the driver part merges them into state.

:class:`Aggregation` covers windowed aggregation (tumbling or sliding event-time windows with a
watermark, update or append output) and continuous (unwindowed) aggregation, with sum, count,
avg, min and max over any integer or string group columns. Its semantics follow Spark's own
streaming aggregation, so that ``--mode native`` is an exact reference:

* the watermark of batch v is ``max event time (ms) of batches < v - delay``; it starts at 0;
* a (window, key) update whose window ends at or before the watermark is late: dropped and counted;
* windows ending at or before the watermark are evicted (append mode emits them first, once).

Windows are closed at the end of the batch that advances the watermark, which is when Spark's
next (possibly no-data) batch would close them: the results are the same.

Tumbling windows are stored per (window, key); sliding windows as panes of one slide
(:mod:`misa.operators.sliding`): Spark pre-aggregates each event into its one pane, and a window's
value is combined from its panes when it is emitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from misa.config import parse_seconds
from misa.operators.base import MAX_EVENT, PANE_END, ROWS, WINDOW_END, WINDOW_START, OperatorResult, micros
from misa.operators.panes import PaneWindows, record_keys
from misa.operators.sliding import PaneState, Windows
from misa.operators.watermark import EventTimeWatermark
from misa.state.codec import AGG_FIELDS, KeyCodec, decode_aggs, encode_aggs, merge_aggs
from misa.state.keys import window_prefix
from misa.state.view import StateView
from prefetch.hints import HINT_TS, HINT_WINDOW_END, HintSpec, no_hints

AGG_FUNCTIONS = ("sum", "count", "avg", "min", "max")
PANE_LAYOUT = "panes-v1"  # stored with each version of a sliding aggregation


@dataclass(frozen=True)
class Agg:
    """One output column: ``function`` (sum, count, avg, min, max) of input ``column``."""

    name: str
    function: str
    column: str

    def __post_init__(self) -> None:
        if self.function not in AGG_FUNCTIONS:
            raise ValueError(f"aggregate {self.name}: unknown function {self.function!r}; use one of {AGG_FUNCTIONS}")


@dataclass
class Aggregation:
    """Grouped aggregation, windowed when ``window`` is given (``slide`` defaults to ``window``)."""

    group_by: Sequence[str]
    aggs: Sequence[Agg]
    event_time: str | None = None  # a timestamp column; required for windows
    window: str | None = None
    slide: str | None = None
    watermark_delay: str = "0s"
    output_mode: str = "update"
    watermark: EventTimeWatermark = field(init=False)
    _codec: KeyCodec | None = field(default=None, init=False, repr=False)
    _panes: PaneState | None = field(default=None, init=False, repr=False)  # sliding windows only

    def __post_init__(self) -> None:
        if self.output_mode not in ("update", "append"):
            raise ValueError(f"output mode {self.output_mode!r}: use update or append")
        if self.window and not self.event_time:
            raise ValueError("a windowed aggregation needs event_time (a timestamp column)")
        if self.output_mode == "append" and not self.window:
            raise ValueError("append output needs windows with a watermark (rows must be final when emitted)")
        self.delay_ms = int(parse_seconds(self.watermark_delay) * 1000)
        self.watermark = EventTimeWatermark(self.delay_ms)
        size, slide = micros(self.window), micros(self.slide)
        if size and slide and slide != size:
            if not 0 < slide < size:
                raise ValueError(f"slide {self.slide!r} must be positive and at most the window {self.window!r}")
            self._panes = PaneState(PaneWindows(size, slide), len(self.aggs), append=self.output_mode == "append")

    @property
    def time_columns(self) -> list[str]:
        """The time columns of the deltas: the pane end (sliding), the window bounds (tumbling), or none."""
        if self._panes is not None:
            return [PANE_END]
        return [WINDOW_START, WINDOW_END] if self.window else []

    # ------------------------------------------------------------------ Spark side
    def deltas(self, batch: DataFrame) -> DataFrame:
        groups: list[Column] = [F.col(c) for c in self.group_by]
        measures = [F.count(F.lit(1)).alias(ROWS)]
        if self.event_time:
            measures.append(F.max(F.unix_micros(F.col(self.event_time))).alias(MAX_EVENT))
        for i, agg in enumerate(self.aggs):
            column = F.col(agg.column)  # count takes any column type; the others cast to double
            value = F.when(column.isNotNull(), F.lit(1.0)) if agg.function == "count" else column.cast("double")
            measures += [
                F.sum(value).alias(f"_s{i}"),
                F.count(value).cast("double").alias(f"_c{i}"),
                F.min(value).alias(f"_n{i}"),
                F.max(value).alias(f"_x{i}"),
            ]
        if not self.window:
            return batch.groupBy(*groups).agg(*measures)
        if self._panes is not None:  # each event into its one pane
            pane = f"{self._panes.windows.pane_us} microseconds"
            grouped = batch.groupBy(F.window(F.col(self.event_time), pane).alias("_w"), *groups).agg(*measures)
            times = [F.unix_micros("_w.end").alias(PANE_END)]
        else:
            grouped = batch.groupBy(F.window(F.col(self.event_time), self.window).alias("_w"), *groups).agg(*measures)
            times = [F.unix_micros("_w.start").alias(WINDOW_START), F.unix_micros("_w.end").alias(WINDOW_END)]
        return grouped.select(*times, *self.group_by, *grouped.columns[1 + len(groups) :])

    # ------------------------------------------------------------------ driver side
    def apply(self, deltas: pa.Table, state: StateView) -> OperatorResult:
        result = OperatorResult(self._empty_output(deltas.schema))
        if deltas.num_rows and self.event_time:
            self.watermark.observe(pc.max(deltas[MAX_EVENT]).as_py())
        if self._panes is not None:
            self._apply_panes(self._panes, deltas, state, result)
        else:
            self._apply_keys(deltas, state, result)
        return result

    def _apply_keys(self, deltas: pa.Table, state: StateView, result: OperatorResult) -> None:
        """Unwindowed and tumbling state: one entry per (window, key), merged with its delta."""
        codec = self._key_codec(deltas.schema)
        if self.window and deltas.num_rows:
            late = pc.less_equal(deltas[WINDOW_END], self.watermark.at_us)
            result.late_rows = int(pc.sum(pc.filter(deltas[ROWS], late)).as_py() or 0)
            deltas = deltas.filter(pc.invert(late))
        if deltas.num_rows:
            ends = deltas[WINDOW_END].to_numpy() if self.window else None
            keys = codec.encode(ends, [deltas[c].combine_chunks() for c in self.group_by])
            ts = deltas[MAX_EVENT].to_numpy().tolist() if self.event_time else 0
            old = decode_aggs(state.get_many(keys, ts), len(self.aggs))
            merged = merge_aggs(old, self._delta_states(deltas))
            state.put_many(keys, encode_aggs(merged), ts)
            result.state_reads = len(keys)
            if self.output_mode == "update":
                result.output = self._output(deltas.select(self._key_columns()), merged)
        if self.window:
            self._close_windows(state, result)

    def _apply_panes(self, panes: PaneState, deltas: pa.Table, state: StateView, result: OperatorResult) -> None:
        """Sliding windows: drop pane deltas whose windows all closed (counting each late window's rows),
        fold the rest into the pane records, emit changed windows (update) or closed ones (append)."""
        codec = self._key_codec(deltas.schema)
        watermark = self.watermark.at_us
        if deltas.num_rows:
            ends = deltas[PANE_END].to_numpy()
            late = panes.windows.late_windows(ends, watermark)
            result.late_rows = int((deltas[ROWS].to_numpy() * late).sum())
            deltas = deltas.filter(pa.array(panes.windows.last_window_end(ends) > watermark))
        if deltas.num_rows:
            group_keys = codec.encode(None, [deltas[c].combine_chunks() for c in self.group_by])
            events = deltas[MAX_EVENT].to_numpy()
            changed = panes.merge(
                group_keys, deltas[PANE_END].to_numpy(), self._delta_states(deltas), events, watermark, state
            )
            result.state_reads = len(changed.group_keys)
            if self.output_mode == "update":
                result.output = self._window_output(changed)
        advanced = self.watermark.advance()
        if advanced is not None:
            closed = panes.close(watermark, advanced, state)
            if self.output_mode == "append" and len(closed.keys):
                result.output, result.closed_windows = self._window_output(closed), len(closed.keys)

    def _window_output(self, windows: Windows) -> pa.Table:
        assert self._codec is not None
        _, columns = self._codec.decode(windows.group_keys)
        picked = [pc.take(c, pa.array(windows.keys)) for c in columns]
        keys = pa.table(dict(zip(self._key_columns(), self._window_columns(windows.ends) + picked)))
        return self._output(keys, windows.states)

    def _key_codec(self, schema: pa.Schema) -> KeyCodec:
        if self._codec is None:
            windowed = bool(self.window) and self._panes is None  # pane records are keyed by the group alone
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
        if self.window and hints.num_rows:
            ends = hints[HINT_WINDOW_END]
            if self._panes is not None:
                ends = pa.array(self._panes.windows.last_window_end(ends.to_numpy()))
            hints = hints.filter(pc.greater(ends, self.watermark.at_us))
        if not hints.num_rows:
            return no_hints()
        codec = self._key_codec(hints.schema)
        columns = [hints[c].combine_chunks() for c in self.group_by]
        if self._panes is not None:
            return record_keys(codec.encode(None, columns)), hints[HINT_TS].to_numpy()
        ends = hints[HINT_WINDOW_END].to_numpy() if self.window else None
        return codec.encode(ends, columns), hints[HINT_TS].to_numpy()

    def _delta_states(self, deltas: pa.Table) -> np.ndarray:
        cols = []
        for i in range(len(self.aggs)):
            cols += [
                deltas[f"_s{i}"].fill_null(0.0),
                deltas[f"_c{i}"],
                deltas[f"_n{i}"].fill_null(np.inf),
                deltas[f"_x{i}"].fill_null(-np.inf),
            ]
        return np.column_stack([c.to_numpy() for c in cols]).astype(np.float64)

    def _close_windows(self, state: StateView, result: OperatorResult) -> None:
        """Advance the watermark; emit (append) and evict windows ending at or before it."""
        watermark = self.watermark.advance()
        if watermark is None:
            return
        begin, end = window_prefix(0), window_prefix(watermark + 1)
        if self.output_mode == "append":
            closed = state.scan(begin, end)
            if closed:
                assert self._codec is not None
                ends, cols = self._codec.decode([k for k, _ in closed])
                keys = pa.table(dict(zip(self._key_columns(), self._window_columns(ends) + cols)))
                result.output = self._output(keys, decode_aggs([v for _, v in closed], len(self.aggs)))
                result.closed_windows = len(closed)
        state.delete_range(begin, end)

    def _window_columns(self, ends: np.ndarray) -> list[pa.Array]:
        size_us = micros(self.window) or 0
        return [pa.array(ends - size_us, pa.int64()), pa.array(ends, pa.int64())]

    def _key_columns(self) -> list[str]:
        return ([WINDOW_START, WINDOW_END] if self.window else []) + list(self.group_by)

    def _output(self, keys: pa.Table, states: np.ndarray) -> pa.Table:
        columns: dict[str, pa.Array] = {}
        if self.window:
            columns["window_start"] = pc.cast(keys[WINDOW_START], pa.timestamp("us", tz="UTC"))
            columns["window_end"] = pc.cast(keys[WINDOW_END], pa.timestamp("us", tz="UTC"))
        for c in self.group_by:
            columns[c] = keys[c]
        for i, agg in enumerate(self.aggs):
            s, n, lo, hi = (states[:, i * AGG_FIELDS + j] for j in range(AGG_FIELDS))
            if agg.function == "count":
                columns[agg.name] = pa.array(n.astype(np.int64))
                continue
            value = {"sum": s, "avg": s / np.where(n == 0, 1, n), "min": lo, "max": hi}[agg.function]
            columns[agg.name] = pa.array(value, mask=(n == 0))
        return pa.table(columns)

    def _empty_output(self, schema: pa.Schema) -> pa.Table:
        types = {WINDOW_START: pa.int64(), WINDOW_END: pa.int64()} | {c: schema.field(c).type for c in self.group_by}
        keys = pa.table({c: pa.array([], types[c]) for c in self._key_columns()})
        return self._output(keys, np.zeros((0, len(self.aggs) * AGG_FIELDS)))

    def metadata(self) -> dict[str, Any]:
        return {**self.watermark.metadata(), **({"layout": PANE_LAYOUT} if self._panes is not None else {})}

    def restore(self, metadata: dict[str, Any]) -> None:
        if self._panes is not None and metadata and metadata.get("layout") != PANE_LAYOUT:
            raise ValueError(
                "this version's sliding-window state was written per (window, key) by an earlier release, "
                f"not as panes ({PANE_LAYOUT}): run the query from a new checkpoint location and state dir"
            )
        self.watermark.restore(metadata)
