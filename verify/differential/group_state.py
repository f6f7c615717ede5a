"""``applyInPandasWithState`` functions the differential cases run through plain Spark and ``misa.from_query``.

Each function is written only against Spark's API (``GroupState``), over the case's rows (keys, ``t`` in ms, ``v``
bigint, ``event_time``), and its output does not depend on the order of a group's rows in a batch, so both engines'
rows compare as multisets:

* ``running`` (``NoTimeout``, Update): a group's row count and total so far, and the watermark it was called with;
* ``sessions`` (``EventTimeTimeout``, Append): a session per group closed ``GAP_MS`` after its latest row by an
  event-time timeout (also in batches without data), emitted when it times out; a batch whose rows all have a null
  value changes nothing (the state and its timeout stay, as Spark keeps them);
* ``idle`` (``ProcessingTimeTimeout``, Update): a group's row count, its timeout an hour of processing time after
  its latest batch (no run of a test lasts that long: no group times out, in both engines);
* ``instant`` (``ProcessingTimeTimeout``, Update): the same with a 1 ms timeout: each batch times out every group
  its predecessor saw and it does not (a batch starts more than 1 ms after the one before, in both engines);
* ``counted`` (``NoTimeout``, Append): a group's row count so far, per call (the form Spark runs an aggregation over,
  in update output: :data:`TOTALLED`);
* ``typed`` (``NoTimeout``, Update): a state of every kind of field Spark stores in ``applyInPandasWithState`` (a
  timestamp, a date, a decimal rounded to its scale at each update, binary, a day-time interval and a struct): each
  call outputs the state as it read it, with the Python types of its fields.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Iterable, Iterator

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

GAP_MS = 10_000
IDLE_MS = 3_600_000


def _frame(key: tuple, names: list[str], **values: Any) -> pd.DataFrame:
    return pd.DataFrame({**{name: [k] for name, k in zip(names, key)}, **{c: [v] for c, v in values.items()}})


def running(key: tuple, pdfs: Iterable[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    rows, total = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        rows += len(pdf)
        total += int(pdf["v"].fillna(0).sum())
    state.update((rows, total))
    yield _frame(key, KEY_NAMES, rows=rows, total=total, watermark_ms=state.getCurrentWatermarkMs())


def sessions(key: tuple, pdfs: Iterable[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    if state.hasTimedOut:
        rows, first, last = state.get
        state.remove()
        yield _frame(
            key, KEY_NAMES, rows=rows, first_ms=first, last_ms=last, watermark_ms=state.getCurrentWatermarkMs()
        )
        return
    batch = pd.concat(list(pdfs), ignore_index=True)
    if batch["v"].isna().all():  # nothing written: the stored session and its timeout stay
        return
    rows, first, last = state.get if state.exists else (0, None, None)
    times = batch["t"].astype("int64")
    first = int(times.min()) if first is None else min(first, int(times.min()))
    last = int(times.max()) if last is None else max(last, int(times.max()))
    state.update((rows + len(batch), first, last))
    state.setTimeoutTimestamp(max(last + GAP_MS, state.getCurrentWatermarkMs()))


def _count_until_idle(key: tuple, pdfs: Iterable[pd.DataFrame], state: GroupState, idle_ms: int) -> pd.DataFrame:
    """A group's row count, its timeout ``idle_ms`` of processing time later; a timed-out group's last count."""
    if state.hasTimedOut:
        (rows,) = state.get
        state.remove()
        return _frame(key, KEY_NAMES, rows=rows, timed_out=True)
    rows = (state.get[0] if state.exists else 0) + sum(len(pdf) for pdf in pdfs)
    state.update((rows,))
    state.setTimeoutDuration(idle_ms)
    return _frame(key, KEY_NAMES, rows=rows, timed_out=False)


def counted(key: tuple, pdfs: Iterable[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    rows = (state.get[0] if state.exists else 0) + sum(len(pdf) for pdf in pdfs)
    state.update((rows,))
    yield _frame(key, KEY_NAMES, rows=rows)


def idle(key: tuple, pdfs: Iterable[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    yield _count_until_idle(key, pdfs, state, IDLE_MS)


def instant(key: tuple, pdfs: Iterable[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    yield _count_until_idle(key, pdfs, state, 1)


def typed(key: tuple, pdfs: Iterable[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    batch = pd.concat(list(pdfs), ignore_index=True)
    if state.exists:
        rows, latest, first_day, total, tag, widest, span = state.get
        low, high = span.low, span.high  # a struct field comes back as a Row
    else:
        rows, latest, first_day, total, tag, widest, low, high = 0, None, None, Decimal(0), b"", None, 0, 0
    read = dict(rows=rows, latest=latest, first_day=first_day, total=total, tag=tag.decode(), low=low, high=high)
    read["widest_us"] = None if widest is None else widest // dt.timedelta(microseconds=1)
    read["kinds"] = ",".join(type(field).__name__ for field in state.get) if state.exists else ""
    values = [int(v) for v in batch["v"].dropna()]
    times = batch["event_time"].dropna()
    if len(times):
        newest, oldest = times.max().to_pydatetime(), times.min()
        latest = newest if latest is None else max(latest, newest)
        first_day = oldest.date() if first_day is None else min(first_day, oldest.date())
        width = (times.max() - oldest).to_pytimedelta()
        widest = width if widest is None else max(widest, width)
    total += Decimal(sum(values)) / 8  # stored as decimal(12, 2): rounded half up at each update
    span = (min([low, *values]), max([high, *values]))
    state.update((rows + len(batch), latest, first_day, total, tag + b"%d;" % len(batch), widest, span))
    yield _frame(key, KEY_NAMES, **read)  # the state as this call read it


KEY_NAMES = ["k0"]  # the cases' one key column


@dataclass(frozen=True)
class Shape:
    """A function with its output and state schemas (after the key), timeout and output mode."""

    function: Callable[..., Iterator[pd.DataFrame]]
    output: str
    state: str
    timeout: str
    mode: str


SHAPES = {
    "running": Shape(
        running,
        "rows long, total long, watermark_ms long",
        "rows long, total long",
        GroupStateTimeout.NoTimeout,
        "update",
    ),
    "sessions": Shape(
        sessions,
        "rows long, first_ms long, last_ms long, watermark_ms long",
        "rows long, first_ms long, last_ms long",
        GroupStateTimeout.EventTimeTimeout,
        "append",
    ),
    "idle": Shape(idle, "rows long, timed_out boolean", "rows long", GroupStateTimeout.ProcessingTimeTimeout, "update"),
    "instant": Shape(
        instant, "rows long, timed_out boolean", "rows long", GroupStateTimeout.ProcessingTimeTimeout, "update"
    ),
    "counted": Shape(counted, "rows long", "rows long", GroupStateTimeout.NoTimeout, "append"),
    "typed": Shape(
        typed,
        "rows long, latest timestamp, first_day date, total decimal(12,2), tag string, low long, high long, "
        "widest_us long, kinds string",
        "rows long, latest timestamp, first_day date, total decimal(12,2), tag binary, widest interval day to second, "
        "span struct<low:bigint,high:bigint>",
        GroupStateTimeout.NoTimeout,
        "update",
    ),
}
DRAWN = ("running", "sessions", "idle")  # the random cases' (instant's timeouts fire in batches Spark adds)
TYPED = "typed"  # drawn apart, in a share of the random cases
TOTALLED = "aggregate_above"  # a case's chain: ``counted``, then per key its calls and most rows (update output)


def group_state_query(
    events: DataFrame, keys: dict[str, str], function: str, delay_s: int, deduplicated: bool = False
) -> DataFrame:
    """``events`` (with ``event_time``) watermarked and grouped by ``keys``, through the function ``function``; with
    ``deduplicated``, a dropDuplicates of the keys and the event time first (a chain of two stateful operations)."""
    shape = SHAPES[function]
    key_columns = ", ".join(f"`{name}` {dtype}" for name, dtype in keys.items())
    rows = events.withWatermark("event_time", f"{delay_s} seconds")
    if deduplicated:
        rows = rows.dropDuplicates([*keys, "event_time"])
    return rows.groupBy(*keys).applyInPandasWithState(
        shape.function, f"{key_columns}, {shape.output}", shape.state, shape.mode.capitalize(), shape.timeout
    )


def totalled(rows: DataFrame, keys: dict[str, str]) -> DataFrame:
    """Per key, the calls of ``counted`` and the most rows it counted (the aggregation of :data:`TOTALLED`)."""
    return rows.groupBy(*keys).agg(F.count("*").alias("calls"), F.max("rows").alias("most"))
