"""The interval join's driver side with hand-made deltas and a real state store (no Spark)."""

import numpy as np
import pyarrow as pa
import pytest

from misa.operators.interval_join import EVENT_US, IntervalJoin
from misa.state.codec import KeyCodec
from misa.state.store import StateStore
from misa.state.view import StateView
from prefetch.hints import HINT_TS, HINT_WINDOW_END, HintSpec
from tests.state_helpers import apply_then_idle

S = 1_000_000  # one second in microseconds


@pytest.fixture
def view(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        yield StateView(store)


def join(delay: str = "1h") -> IntervalJoin:
    return IntervalJoin(["vid"], "event_time", ["time", "spd"], interval="30s", watermark_delay=delay)


def reports(*rows: tuple) -> pa.Table:
    """rows: (vid, time_s, spd); deltas as IntervalJoin.deltas makes them."""
    return pa.table(
        {
            "vid": pa.array([r[0] for r in rows], pa.int64()),
            EVENT_US: pa.array([None if r[1] is None else r[1] * S for r in rows], pa.int64()),
            "time": pa.array([r[1] for r in rows], pa.int64()),
            "spd": pa.array([r[2] for r in rows], pa.int32()),
        }
    )


def pairs(table: pa.Table) -> set[tuple]:
    """(vid, time, prev_time) of each output row; fails on duplicates."""
    rows = [(r["vid"], r["time"], r["prev_time"]) for r in table.to_pylist()]
    assert len(rows) == len(set(rows)), rows
    return set(rows)


def bucket_ends(view: StateView) -> list[int]:
    return sorted({int.from_bytes(k[:8], "big") // S for k, _ in view.scan(b"", b"\xff" * 9)})


def test_pairs_within_the_interval_are_found_and_outside_not(view):
    op = join()
    first = apply_then_idle(op, reports((1, 1, 10), (1, 11, 11), (2, 6, 20)), view)
    assert pairs(first.output) == {(1, 11, 1)}
    second = apply_then_idle(op, reports((1, 31, 12), (1, 41, 13), (2, 37, 21), (3, 36, 30)), view)
    # 31 joins 1 (the bound is inclusive) and 11; 41 joins 11 and 31 but not 1; vid 2's 6 is 31 s before 37
    assert pairs(second.output) == {(1, 31, 1), (1, 31, 11), (1, 41, 11), (1, 41, 31)}
    row = next(r for r in second.output.to_pylist() if (r["time"], r["prev_time"]) == (41, 31))
    assert (row["spd"], row["prev_spd"]) == (13, 12)
    assert second.output.column_names == ["vid", "time", "prev_time", "spd", "prev_spd"]
    assert second.output.schema.field("prev_spd").type == pa.int32()


def test_rows_of_one_batch_join_each_other_and_equal_times_do_not(view):
    out = apply_then_idle(join(), reports((7, 21, 1), (7, 1, 2), (7, 11, 3), (7, 11, 4), (8, 11, 5)), view).output
    assert sorted((r["time"], r["prev_time"], r["spd"], r["prev_spd"]) for r in out.to_pylist()) == [
        (11, 1, 3, 2),
        (11, 1, 4, 2),
        (21, 1, 1, 2),
        (21, 11, 1, 3),
        (21, 11, 1, 4),
    ]


def test_an_older_row_arriving_later_still_pairs_with_the_stored_newer_one(view):
    op = join()
    apply_then_idle(op, reports((1, 65, 1)), view)
    late_arrival = apply_then_idle(op, reports((1, 40, 2), (1, 80, 3)), view)
    assert pairs(late_arrival.output) == {(1, 65, 40), (1, 80, 65)}


def test_state_layout_is_bucket_end_then_key_with_packed_records(view):
    op = join()
    apply_then_idle(op, reports((1, 5, 1), (1, 25, 2), (1, 31, 3), (2, 31, 4)), view)
    state = view.scan(b"", b"\xff" * 9)
    assert bucket_ends(view) == [30, 60]
    first = dict(state)[state[0][0]]
    assert len(first) == 2 * (8 + 2 * 9)  # two rows: event time, then per payload column int64 + null flag
    assert np.frombuffer(first[:8], "<i8")[0] == 5 * S


def test_expiry_removes_buckets_no_future_row_can_join(view):
    op = join(delay="0s")
    apply_then_idle(op, reports((1, 5, 1)), view)
    assert bucket_ends(view) == [30]
    assert pairs(apply_then_idle(op, reports((1, 35, 2), (2, 65, 3)), view).output) == {(1, 35, 5)}
    assert op.watermark.at_us == 65 * S
    # rows at or before 65 - 30 s can join nothing after the watermark: the bucket ending at 30 s goes
    assert bucket_ends(view) == [60, 90]
    result = apply_then_idle(op, reports((1, 100, 4)), view)
    assert bucket_ends(view) == [90, 120] and pairs(result.output) == set()


def test_late_rows_are_counted_not_joined_nor_stored(view):
    op = join(delay="10s")
    assert (
        apply_then_idle(op, reports((1, 0, 0), (1, 50, 1)), view).late_rows == 1
    )  # the watermark starts at 0, as Spark's
    assert op.watermark.at_us == 40 * S
    result = apply_then_idle(op, reports((1, 40, 2), (1, 35, 3), (2, None, 4), (1, 41, 5)), view)
    assert result.late_rows == 3
    assert pairs(result.output) == {(1, 50, 41)}
    assert apply_then_idle(op, reports((1, 70, 6)), view).output.num_rows == 2  # 41 and 50, not the late 40


def test_string_keys_and_null_payloads_round_trip(view):
    op = IntervalJoin(["user"], "ts", ["n"], interval="10s")
    table = pa.table({"user": ["a", "b", "a"], EVENT_US: pa.array([1 * S, 2 * S, 3 * S]), "n": pa.array([None, 1, 2])})
    apply_then_idle(op, table.slice(0, 2), view)
    out = apply_then_idle(op, table.slice(2), view).output.to_pylist()
    assert out == [{"user": "a", "n": 2, "prev_n": None}]


def test_restore_from_metadata_continues_with_the_stored_state(view):
    op = join(delay="5s")
    apply_then_idle(op, reports((1, 10, 1), (2, 20, 2)), view)
    resumed = join(delay="5s")
    resumed.restore(op.metadata())
    assert (resumed.watermark.at_us, resumed.watermark.max_event_us) == (15 * S, 20 * S)
    result = apply_then_idle(resumed, reports((1, 14, 3), (1, 30, 4), (2, 45, 5)), view)
    assert result.late_rows == 1 and pairs(result.output) == {(1, 30, 10), (2, 45, 20)}


def test_hint_keys_name_the_buckets_a_row_reads_and_leave_out_late_rows(view):
    op = join(delay="0s")
    apply_then_idle(op, reports((1, 40, 1)), view)  # watermark 40 s
    hints = pa.table({HINT_WINDOW_END: [60 * S, 90 * S], "vid": [1, 2], HINT_TS: [40 * S, 70 * S]})
    keys, ts = op.hint_keys(hints)
    ends, (vids,) = KeyCodec([pa.field("vid", pa.int64())], windowed=True).decode(keys)
    assert list(zip((ends // S).tolist(), vids.to_pylist())) == [(90, 2), (60, 2)] and ts.tolist() == [70 * S] * 2
    assert op.hint_spec() == HintSpec(("vid",), "event_time", 30 * S, 30 * S)


def test_empty_batch_gives_typed_empty_output(view):
    out = apply_then_idle(join(), reports((1, 1, 1)).slice(0, 0), view).output
    assert out.num_rows == 0 and out.column_names == ["vid", "time", "prev_time", "spd", "prev_spd"]


def test_bad_definitions_are_explained(view):
    with pytest.raises(ValueError, match="clash"):
        IntervalJoin(["time"], "event_time", ["time"])
    with pytest.raises(ValueError, match="must be positive"):
        IntervalJoin(["vid"], "event_time", ["spd"], interval="0s")
    with pytest.raises(TypeError, match="payload column x has type double"):
        IntervalJoin(["vid"], "t", ["x"]).apply(pa.table({"vid": [1], EVENT_US: [1], "x": [1.5]}), view)
    with pytest.raises(KeyError, match=r"lack columns \['x'\]"):
        IntervalJoin(["vid"], "t", ["x"]).apply(pa.table({"vid": [1], EVENT_US: [1]}), view)


def test_the_join_through_the_memory_tier_gives_the_rows_of_the_join_without_it(config, tmp_path):
    """Random batches, each frozen before the next (so later batches read the buckets through the tier, held per
    window), the watermark closing windows on the way: the same output as a view without the tier."""
    from misa.runtime.batch_cache import new_view

    rng = np.random.default_rng(5)
    ops = [join("20s"), join("20s")]
    with (
        StateStore(config, tmp_path / "a", f"file://{tmp_path / 'a-dfs'}") as held,
        StateStore(config, tmp_path / "b", f"file://{tmp_path / 'b-dfs'}") as plain,
    ):
        views = [new_view(held, config, ops[0]), StateView(plain)]
        assert views[0].memory is not None and views[1].memory is None
        oldest, tier_reads, found = [], 0, 0
        for batch in range(12):
            rows = [(int(rng.integers(0, 6)), int(10 * batch + rng.integers(-15, 10)), i) for i in range(20)]
            outputs = []
            for op, view in zip(ops, views):
                output = apply_then_idle(op, reports(*rows), view).output
                outputs.append(sorted(tuple(r.values()) for r in output.to_pylist()))
                view.freeze(batch + 1)
            assert outputs[0] == outputs[1], f"batch {batch}"
            found += len(outputs[0])
            tier_reads += views[0].memory.take_stats()["memory_reads"]
            oldest.append(bucket_ends(views[0])[0])
        assert found > 100 and tier_reads > 100  # pairs found, reads the tier answered
        assert oldest[-1] > oldest[0]  # the watermark dropped the oldest windows on the way
        assert bucket_ends(views[0]) == bucket_ends(views[1])
