"""The aggregation operator's driver side and the state codec, with hand-made deltas (no Spark)."""

import numpy as np
import pyarrow as pa
import pytest

from misa.operators.aggregation import Agg, Aggregation
from misa.state.codec import KeyCodec
from misa.state.store import StateStore
from misa.state.view import StateView
from tests.state_helpers import apply_then_idle

S = 1_000_000  # one second in microseconds


@pytest.fixture
def view(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        yield StateView(store)


def deltas(rows: list[tuple], window_s: int | None = 10) -> pa.Table:
    """rows: (window_end_s or None, group, n, partial value of the one aggregate, max_event_s)."""
    cols: dict[str, list] = {}
    if window_s:
        cols["_window_start_us"] = [(r[0] - window_s) * S for r in rows]
        cols["_window_end_us"] = [r[0] * S for r in rows]
    cols["g"] = [r[1] for r in rows]
    cols["_rows"] = [r[2] for r in rows]
    cols["_max_event_us"] = [r[4] * S for r in rows]
    cols["_v0"], cols["_c0"] = [float(r[3]) for r in rows], [r[2] for r in rows]
    types = {"g": pa.int64() if rows and isinstance(rows[0][1], int) else pa.string(), "_c0": pa.int64()}
    return pa.table({k: pa.array(v, types.get(k)) for k, v in cols.items()})


def rows_of(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


def test_codec_round_trips_ints_strings_and_nulls():
    for fields, cols in [
        (
            [pa.field("a", pa.int64()), pa.field("b", pa.int32())],
            [pa.array([1, None, -5]), pa.array([7, 8, None], pa.int32())],
        ),
        ([pa.field("u", pa.string()), pa.field("a", pa.int64())], [pa.array(["x", None, "ü"]), pa.array([1, 2, 3])]),
    ]:
        codec = KeyCodec(fields, windowed=True)
        ends, back = codec.decode(codec.encode(np.array([30, 20, 10]), cols))
        assert ends.tolist() == [30, 20, 10] and [c.to_pylist() for c in back] == [c.to_pylist() for c in cols]
    keys = KeyCodec([pa.field("a", pa.int64())], windowed=True).encode(np.array([2, 1]), [pa.array([0, 99])])
    assert sorted(keys) == [keys[1], keys[0]]  # window end leads the key: closing windows is a range


def test_update_mode_outputs_changed_windows_with_current_values(view):
    op = Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", watermark_delay="30s")
    first = apply_then_idle(op, deltas([(10, 1, 2, 5.0, 9), (20, 2, 1, 7.0, 12)]), view)
    assert [(r["window_end"].second, r["g"], r["s"]) for r in rows_of(first.output)] == [(10, 1, 5.0), (20, 2, 7.0)]
    second = apply_then_idle(op, deltas([(10, 1, 1, 1.5, 13)]), view)
    assert [(r["g"], r["s"]) for r in second.output.to_pylist()] == [(1, 6.5)]


def test_every_aggregate_function(view):
    aggs = [
        Agg("s", "sum", "x"),
        Agg("a", "avg", "x"),
        Agg("n", "count", "x"),
        Agg("lo", "min", "x"),
        Agg("hi", "max", "x"),
    ]
    op = Aggregation(["g"], aggs)
    table = deltas([(None, "k", 2, 6.0, 1)], window_s=None).drop_columns(["_v0", "_c0"])
    partials = [pa.array([6.0]), pa.array([6.0]), pa.array([2]), pa.array([1.0]), pa.array([5.0])]
    for i, partial in enumerate(partials):  # every aggregate reads the same input column (two rows: 1, 5)
        table = table.append_column(f"_v{i}", partial).append_column(f"_c{i}", pa.array([2]))
    apply_then_idle(op, table, view)
    out = apply_then_idle(op, table, view).output.to_pylist()
    assert out == [{"g": "k", "s": 12.0, "a": 3.0, "n": 4, "lo": 1.0, "hi": 5.0}]


def test_watermark_drops_late_updates_and_evicts_closed_windows(view):
    op = Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", watermark_delay="5s")
    apply_then_idle(op, deltas([(10, 1, 1, 1.0, 9), (20, 1, 1, 2.0, 16)]), view)
    assert op.watermark.at_us == 11 * S  # 16 s - 5 s: the window ending at 10 s closes
    assert view.get_many(op._codec.encode(np.array([10 * S]), [pa.array([1])])) == [None]
    late = apply_then_idle(op, deltas([(10, 1, 3, 9.0, 8), (20, 1, 1, 1.0, 17)]), view)
    assert late.late_rows == 3
    assert [(r["window_end"].second, r["s"]) for r in late.output.to_pylist()] == [(20, 3.0)]


def test_append_mode_emits_each_window_once_when_it_closes(view):
    op = Aggregation(
        ["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", watermark_delay="0s", output_mode="append"
    )
    first = apply_then_idle(op, deltas([(10, 1, 1, 1.0, 5), (10, 2, 1, 2.0, 6)]), view)
    assert first.output.num_rows == 0
    second = apply_then_idle(op, deltas([(10, 1, 1, 4.0, 9), (20, 1, 1, 1.0, 10)]), view)
    assert [(r["window_end"].second, r["g"], r["s"]) for r in rows_of(second.output)] == [(10, 1, 5.0), (10, 2, 2.0)]
    third = apply_then_idle(op, deltas([(30, 1, 1, 1.0, 25)]), view)
    assert [(r["window_end"].second, r["s"]) for r in third.output.to_pylist()] == [(20, 1.0)]


def test_metadata_round_trip():
    op = Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="10s")
    op.watermark.at_us, op.watermark.max_event_us = 5, 9
    other = Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="10s")
    other.restore(op.metadata())
    assert (other.watermark.at_us, other.watermark.max_event_us) == (5, 9)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"window": "10s"}, "needs event_time"),
        ({"output_mode": "replace"}, "use one of update, append, complete"),
        ({"output_mode": "append"}, "append output needs windows"),
    ],
)
def test_bad_operator_definitions_are_explained(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Aggregation(["g"], [Agg("s", "sum", "x")], **kwargs)
    with pytest.raises(ValueError, match="unknown function"):
        Agg("m", "median", "x")
