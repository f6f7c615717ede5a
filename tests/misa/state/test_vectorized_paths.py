"""The column-at-a-time paths of the state phase give exactly what the per-key code they replaced gave.

Each reference below is the per-key code of the previous release, kept here as the oracle; the keys are
random, of every key type (integers, booleans, dates, timestamps, floats with -0.0 and NaN, strings with
non-ASCII and empty ones), with nulls, of one length and of mixed lengths.
"""

from __future__ import annotations

import datetime as dt
import struct

import numpy as np
import pyarrow as pa
import pytest

from misa.operators.panes import PaneRecords, Panes, record_keys, timer_keys
from misa.state.codec import KeyCodec, _to_int64, distinct_keys
from misa.state.keys import PANE_RECORD, PANE_TIMER, joined, prefixed, split_fixed, window_prefix

SEEDS = range(5)


def random_column(rng: np.random.Generator, kind: str, n: int) -> pa.Array:
    """``n`` random values of ``kind`` with about a fifth nulls."""
    nulls = rng.random(n) < 0.2
    if kind == "int":
        values = pa.array(rng.integers(-(2**62), 2**62, n), mask=nulls)
    elif kind == "small":
        values = pa.array(rng.integers(-3, 3, n).astype(np.int32), mask=nulls)
    elif kind == "bool":
        values = pa.array(rng.random(n) < 0.5, mask=nulls)
    elif kind == "date":
        values = pa.array(rng.integers(-1000, 30000, n).astype(np.int32), mask=nulls).view(pa.date32())
    elif kind == "timestamp":
        values = pa.array(rng.integers(0, 2**50, n), mask=nulls).view(pa.timestamp("us", tz="UTC"))
    elif kind == "double":
        pool = np.array([0.0, -0.0, np.nan, 1.5, -2.25, np.inf, 1e300])
        values = pa.array(np.where(rng.random(n) < 0.5, rng.choice(pool, n), rng.normal(size=n)), mask=nulls)
    else:
        pool = ["", "a", "ab", "é", "日本", "x" * 40, "nul\x00in"]
        values = pa.array([None if m else str(rng.choice(pool)) + str(rng.integers(3)) for m in nulls], pa.string())
    return values


KINDS = ("int", "small", "bool", "date", "timestamp", "double", "string")


# ---------------------------------------------------------------------------------------------- references
def reference_variable_parts(column: pa.Array) -> list[bytes]:
    """The per-row key parts of the previous release (KeyCodec's layout for keys with strings)."""
    if not pa.types.is_string(column.type):
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        raw = _to_int64(column).astype(">i8").tobytes()
        return [b"\x01" if null else b"\x00" + raw[8 * r : 8 * r + 8] for r, null in enumerate(nulls)]
    return [b"\x01" if s is None else b"\x00" + struct.pack(">I", len(d := s.encode())) + d for s in column.to_pylist()]


def reference_encode(codec: KeyCodec, ends: np.ndarray | None, columns: list[pa.Array]) -> list[bytes]:
    n = len(columns[0])
    if codec.fixed:
        out = []
        for r in range(n):
            key = window_prefix(int(ends[r])) if ends is not None else b""
            for col in columns:
                null = not col[r].is_valid
                key += bytes([null]) + struct.pack(">q", 0 if null else int(_to_int64(col.slice(r, 1))[0]))
            out.append(key)
        return out
    parts = [reference_variable_parts(c) for c in columns]
    prefix = [window_prefix(int(w)) for w in ends] if ends is not None else [b""] * n
    return [prefix[r] + b"".join(p[r] for p in parts) for r in range(n)]


def reference_pane_encode(records: PaneRecords, keys: int, timers: np.ndarray, panes: Panes) -> list[bytes | None]:
    rows = np.empty(len(panes.ends), records.row)
    rows["end"], rows["state"] = panes.ends, panes.states
    raw = rows.tobytes()
    bounds = np.searchsorted(panes.keys, np.arange(keys + 1)) * records.row.itemsize
    out: list[bytes | None] = []
    for k in range(keys):
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        out.append(np.int64(timers[k]).tobytes() + raw[lo:hi] if hi > lo else None)
    return out


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("windowed", [False, True])
def test_key_encoding_matches_the_per_key_code_for_every_key_type(seed: int, windowed: bool) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    for width in (1, 2, 3):
        kinds = [str(k) for k in rng.choice(KINDS, width)]
        columns = [random_column(rng, k, n) for k in kinds]
        codec = KeyCodec([pa.field(f"c{i}", c.type) for i, c in enumerate(columns)], windowed=windowed)
        ends = rng.integers(0, 2**62, n) if windowed else None
        keys = codec.encode(ends, columns)
        assert keys == reference_encode(codec, ends, columns), kinds
        decoded_ends, decoded = codec.decode(keys)
        assert codec.encode(decoded_ends, decoded) == keys, kinds


def test_string_keys_of_one_row_and_of_all_nulls() -> None:
    for column in (pa.array(["é"]), pa.array([None, None], pa.string()), pa.array([], pa.string())):
        codec = KeyCodec([pa.field("s", pa.string())], windowed=False)
        assert codec.encode(None, [column]) == reference_variable_parts(column)


@pytest.mark.parametrize("seed", SEEDS)
def test_joined_keys_match_concatenation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    times = rng.integers(0, 2**62, 200)
    same = [bytes(rng.integers(0, 256, 9, dtype=np.uint8)) for _ in range(200)]
    mixed = [bytes(rng.integers(0, 256, int(rng.integers(0, 6)), dtype=np.uint8)) for _ in range(200)]
    for keys in (same, mixed, [b""] * 3):
        n = len(keys)
        assert joined(PANE_TIMER, times[:n], keys) == [
            PANE_TIMER + window_prefix(int(t)) + k for t, k in zip(times, keys)
        ]
        assert prefixed(b"r", keys) == [b"r" + k for k in keys]
        assert record_keys(keys) == [PANE_RECORD + k for k in keys]
        assert timer_keys(times[:n], keys) == joined(PANE_TIMER, times[:n], keys)
        assert joined(b"", None, keys) == keys
    assert joined(b"p", None, []) == []


def test_split_fixed_matches_slicing() -> None:
    raw = bytes(range(256)) * 3
    for width in (1, 3, 8):
        n = len(raw) // width
        assert split_fixed(raw[: n * width], width, n) == [raw[i : i + width] for i in range(0, n * width, width)]
    assert split_fixed(b"", 0, 4) == [b""] * 4


@pytest.mark.parametrize("seed", SEEDS)
def test_distinct_keys_match_first_seen_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = [bytes([int(rng.integers(0, 5))]) * int(rng.integers(0, 3)) for _ in range(500)]
    index: dict[bytes, int] = {}
    rows = [index.setdefault(k, len(index)) for k in keys]
    distinct, of_row = distinct_keys(keys)
    assert distinct == list(index) and of_row.tolist() == rows
    assert distinct_keys([])[0] == []


@pytest.mark.parametrize("seed", SEEDS)
def test_pane_records_match_the_per_key_code(seed: int) -> None:
    rng = np.random.default_rng(seed)
    records = PaneRecords(cells=4)
    keys = 50
    counts = rng.integers(0, 4, keys)
    pane_keys = np.repeat(np.arange(keys), counts)
    panes = Panes(pane_keys, rng.integers(0, 2**40, len(pane_keys)), rng.integers(-(2**62), 2**62, (len(pane_keys), 4)))
    timers = rng.integers(0, 2**50, keys)
    encoded = records.encode(keys, timers, panes)
    assert encoded == reference_pane_encode(records, keys, timers, panes)
    decoded_timers, decoded = records.decode(encoded)
    assert decoded_timers.tolist() == [int(t) if c else -1 for t, c in zip(timers, counts)]
    assert decoded.keys.tolist() == pane_keys.tolist()
    assert decoded.ends.tolist() == panes.ends.tolist() and decoded.states.tolist() == panes.states.tolist()


def test_dates_and_timestamps_keep_their_values_through_keys() -> None:
    column = pa.array([dt.date(1969, 12, 31), None, dt.date(2026, 11, 26)])
    codec = KeyCodec([pa.field("d", column.type), pa.field("s", pa.string())], windowed=False)
    strings = pa.array(["a", None, "é"])
    _, (dates, texts) = codec.decode(codec.encode(None, [column, strings]))
    assert dates.to_pylist() == column.to_pylist() and texts.to_pylist() == strings.to_pylist()


class _Writes:
    """A state that records what an operator writes (put_many)."""

    def __init__(self) -> None:
        self.written: dict[bytes, bytes | None] = {}

    def put_many(self, keys, values) -> None:
        self.written.update(zip(keys, values))


@pytest.mark.parametrize("seed", SEEDS)
def test_interval_join_buckets_match_the_per_key_code(seed: int) -> None:
    from misa.operators.interval_join import EVENT_US, IntervalJoin

    rng = np.random.default_rng(seed)
    join = IntervalJoin(["vid"], "event_time", ["spd"], interval="10 seconds")
    n = 200
    rows = pa.table(
        {
            "vid": pa.array(rng.integers(0, 20, n)),
            EVENT_US: pa.array(np.sort(rng.integers(0, 60_000_000, n))),
            "spd": random_column(rng, "int", n),
        }
    )
    join._codec = KeyCodec([rows.schema.field("vid")], windowed=True)
    ends = (rows[EVENT_US].to_numpy() // join.interval_us + 1) * join.interval_us
    own = join._bucket_keys(ends, rows)
    read = list(dict.fromkeys(own + join._bucket_keys(ends - join.interval_us, rows)))
    stored = [
        None if rng.random() < 0.4 else join._pack(rows.slice(int(rng.integers(0, n)), 2)).tobytes() for _ in read
    ]
    state = _Writes()
    join._append(rows, own, pa.array(read, pa.binary()), pa.array(stored, pa.large_binary()), state)
    # the per-key code it replaced: each bucket's stored records, then the batch's rows of that bucket in order
    records, width, old = join._pack(rows).tobytes(), join._record.itemsize, dict(zip(read, stored))
    expected: dict[bytes, bytes] = {}
    for i, key in enumerate(own):
        expected[key] = expected.get(key, old[key] or b"") + records[i * width : (i + 1) * width]
    assert state.written == expected
    present = [(k, v) for k, v in zip(read, stored) if v is not None]
    decoded = join._decode_rows(
        pa.array([k for k, _ in present], pa.binary()), pa.array([v for _, v in present], pa.large_binary())
    )
    per_key = np.concatenate([np.frombuffer(v, join._record) for _, v in present])
    assert decoded[EVENT_US].to_pylist() == per_key["t"].tolist()
    assert decoded["spd"].to_pylist() == [None if null else int(v) for v, null in zip(per_key["v0"], per_key["n0"])]
    owners = np.repeat(np.arange(len(present)), [len(v) // width for _, v in present])
    assert decoded["vid"].to_pylist() == [int.from_bytes(present[o][0][9:17], "big", signed=True) for o in owners]


def test_lookup_state_keys_match_the_per_key_code() -> None:
    from misa.operators.aggregation import Agg, Aggregation
    from misa.operators.lookup_aggregation import LookupAggregation

    aggregation = Aggregation(
        ["campaign"], [Agg("views", "count", "t")], event_time="ts", window="10s", watermark_delay="0s"
    )
    lookup = LookupAggregation("ad", aggregation, lambda keys: [None] * len(keys))
    keys = pa.array(["", "ad-1", "é日本", "nul\x00", "x" * 50])
    assert lookup._state_keys(keys) == [lookup._prefix + k.encode() for k in keys.to_pylist()]
