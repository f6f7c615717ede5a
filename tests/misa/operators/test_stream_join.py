"""StreamJoin, Spark's inner stream-stream join, batch by batch over a real store (the differential tests compare it
with Spark's own through from_query: tests/verify/test_differential_queries.py)."""

from __future__ import annotations

import pyarrow as pa

from misa.operators.stream_join import JoinSide, StreamJoin
from misa.operators.watermark import InputsWatermark
from misa.state.keys import JOIN_ROWS, JOIN_TIMER

TS = pa.timestamp("us", tz="UTC")
LEFT = pa.struct([("l0", pa.int64()), ("l1", TS)])
RIGHT = pa.struct([("r0", pa.int64()), ("r1", TS)])


def rows(*rows: tuple[str, int | None, int]) -> pa.Table:
    """Input rows (side "l" or "r", key, event time in seconds); the row holds the key and the time."""
    side = [0 if s == "l" else 1 for s, _, _ in rows]
    structs = [{f"{s}0": k, f"{s}1": t * 1_000_000} for s, k, t in rows]
    return pa.table(
        {
            "_side": pa.array(side, pa.int32()),
            "_k0": pa.array([k for _, k, _ in rows], pa.int64()),
            "_l": pa.array([r if s == "l" else None for (s, _, _), r in zip(rows, structs)], LEFT),
            "_r": pa.array([r if s == "r" else None for (s, _, _), r in zip(rows, structs)], RIGHT),
        }
    )


def key(value: int) -> bytes:
    """A bigint join key as the state holds it (a null flag, then the value)."""
    return b"\x00" + value.to_bytes(8, "big", signed=True)


def pairs(result) -> list[tuple[int, int]]:
    """The output's (left time, right time) pairs in seconds."""
    out = result.output.to_pylist()
    return sorted((int(r["l1"].timestamp()), int(r["r1"].timestamp())) for r in out)


def interval_join(left_offset_ms: int | None = 0, right_offset_ms: int | None = -10_001) -> StreamJoin:
    """b.t BETWEEN a.t - 10 s AND a.t, both sides watermarked without delay (Spark's offsets for that condition)."""
    return StreamJoin(
        1, JoinSide("l1", 0, (), left_offset_ms), JoinSide("r1", 0, (), right_offset_ms), key_time=None, policy="min"
    )


def test_each_matching_pair_once_in_the_batch_of_its_later_row(run):
    runner = run(interval_join(None, None))
    first = runner.batch(rows(("l", 1, 10), ("r", 1, 5)))
    second = runner.batch(rows(("r", 1, 6), ("l", 1, 12), ("l", 2, 12)))
    assert pairs(first) == [(10, 5)]
    assert pairs(second) == [(10, 6), (12, 5), (12, 6)]  # the new left row meets old and new right rows


def test_a_left_row_the_batch_evicts_still_meets_its_right_rows_a_right_one_is_not_stored(run):
    runner = run(interval_join())
    runner.batch(rows(("l", 9, 100), ("r", 9, 100)))  # the watermark becomes 100 s for the next batch
    evicting = runner.batch(rows(("l", 1, 50), ("r", 1, 50)))  # not late (late-events watermark 0), but evicted
    assert pairs(evicting) == [(50, 50)]
    runner.batch(rows(("l", 3, 200)))
    left_rows_after, right_rows_after = 100, 100 - 10.001  # the state watermarks of the batch with 50 s
    assert 50 <= left_rows_after and 100 > right_rows_after
    assert sorted(runner.keys(JOIN_ROWS)) == [JOIN_ROWS + b"L" + key(3), JOIN_ROWS + b"R" + key(9)]
    assert len(runner.keys(JOIN_TIMER)) == 2  # one per stored row's eviction time


def test_late_rows_are_judged_by_the_minimum_of_both_sides_watermarks(run):
    runner = run(StreamJoin(1, JoinSide("l1", 0), JoinSide("r1", 30_000), policy="min"))
    runner.batch(rows(("l", 1, 100), ("r", 1, 100)))  # left 100 s, right 70 s: the watermark is 70 s
    runner.batch(rows(("l", 1, 101)))
    judged = runner.batch(rows(("l", 1, 60), ("r", 1, 75), ("r", 1, 70)))
    assert judged.late_rows == 2  # 60 s and 70 s, at or before 70 s
    assert pairs(judged) == [(100, 75), (101, 75)]


def test_a_null_key_joins_nothing_and_does_not_move_the_watermark(run):
    runner = run(StreamJoin(1, JoinSide("l1", 0), JoinSide("r1", 0)))
    first = runner.batch(rows(("l", None, 500), ("r", None, 500), ("l", 1, 10), ("r", 1, 10)))
    assert first.dropped_rows == 2 and pairs(first) == [(10, 10)]
    runner.batch(rows(("l", 1, 11)))
    assert runner.batch(rows(("r", 1, 20))).late_rows == 0  # the watermark is 10 s, not 500 s


def test_a_restart_keeps_the_next_batchs_watermark_and_forgets_each_sides_latest_event_time():
    mark = InputsWatermark((0, 0))
    mark.begin_batch()
    mark.observe_input(0, 100_000_000)
    assert mark.begin_batch() == (0, 0)  # the right side has had no rows: 0, as in Spark's WatermarkTracker
    mark.observe_input(1, 10_000_000)
    assert mark.begin_batch() == (0, 10_000_000)  # the minimum
    restarted = InputsWatermark((0, 0))
    restarted.restore(mark.metadata())
    restarted.observe_input(0, 50_000_000)  # the first batch after the restart had left rows only
    assert restarted.begin_batch() == (10_000_000, 10_000_000)  # the right side is 0 again: the commit's 10 s
    restarted.observe_input(1, 60_000_000)
    mark.observe_input(1, 60_000_000)
    assert restarted.begin_batch() == (10_000_000, 50_000_000)  # the left side's 100 s before the restart forgotten
    assert mark.begin_batch() == (10_000_000, 60_000_000)  # without the restart it still counts
    mark.observe_input(1, 90_000_000)  # the next batch's watermark becomes 90 s
    again = InputsWatermark((0, 0))
    again.restore(mark.metadata())
    assert again.begin_batch() == (60_000_000, 90_000_000)  # restored from the commit, before any new row
    one_watermarked = InputsWatermark((0, None))  # a side without withWatermark never counts
    one_watermarked.observe_input(0, 5_000_000)
    assert one_watermarked.begin_batch() == (0, 5_000_000)


def test_with_the_event_time_as_a_join_key_both_sides_evict_by_key(run):
    runner = run(StreamJoin(1, JoinSide("l1", 0), JoinSide("r1", 0), key_time=0))

    def at(seconds: int) -> pa.Table:  # a left and a right row whose join key is their event time
        both = rows(("l", 7, seconds), ("r", 7, seconds))
        return both.set_column(1, "_k0", pa.array([seconds * 1_000_000] * 2, TS))

    assert pairs(runner.batch(at(10))) == [(10, 10)]
    runner.batch(at(30))  # evicts keys at or before 10 s
    assert sorted(k[-8:] for k in runner.keys(JOIN_ROWS)) == [(30_000_000).to_bytes(8, "big")] * 2
    runner.batch(at(31))  # evicts keys at or before 30 s
    assert sorted(k[-8:] for k in runner.keys(JOIN_ROWS)) == [(31_000_000).to_bytes(8, "big")] * 2
