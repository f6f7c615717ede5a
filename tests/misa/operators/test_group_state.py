"""applyInPandasWithState's GroupState on misa's state (no Spark): Spark's write rule, its timeouts, restarts."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.errors import PySparkValueError
from pyspark.sql import types as T

from misa.operators.group_state import group_state_operator
from misa.operators.group_state_values import stored

STATE = T.StructType([T.StructField("n", T.LongType()), T.StructField("last", T.LongType())])
OUTPUT = T.StructType(
    [T.StructField("k", T.StringType()), T.StructField("n", T.LongType()), T.StructField("why", T.StringType())]
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def counting(key, pdfs, state):
    """Counts a group's rows; a row of v 0 leaves the state alone, of v -1 removes it; times out as the row's t asks
    (event time) or 5 s after (processing time)."""
    if state.hasTimedOut:
        n, last = state.get
        yield pd.DataFrame({"k": [key[0]], "n": [n], "why": ["timeout"]})
        if last != 99:  # a group whose last t is 99 is left as it is: it times out again
            state.remove()
        return
    frame = pd.concat(list(pdfs))
    if (frame["v"] == 0).all():
        return
    if (frame["v"] == -1).any():
        state.remove()
        return
    n = (state.get[0] if state.exists else 0) + len(frame)
    last = int(frame["t"].max())
    state.update((n, last))
    if state._timeout_conf == "EventTimeTimeout":
        state.setTimeoutTimestamp(max(last + 10, state.getCurrentWatermarkMs()))
    elif state._timeout_conf == "ProcessingTimeTimeout":
        state.setTimeoutDuration(5000)
    yield pd.DataFrame({"k": [key[0]], "n": [n], "why": ["rows"]})


def rows(*triples: tuple[str, int, int]) -> pa.Table:
    """(k, t in ms, v) rows with the event time ``et`` (t as a timestamp)."""
    t = pa.array([t for _, t, _ in triples], pa.int64())
    return pa.table(
        {
            "k": [k for k, _, _ in triples],
            "t": t,
            "v": pa.array([v for _, _, v in triples], pa.int64()),
            "et": pa.array([x * 1000 for _, x, _ in triples], pa.timestamp("us", tz="UTC")),
        }
    )


def output(result) -> list[tuple]:
    return sorted(tuple(r.values()) for r in result.output.to_pylist())


def operator(timeout: str, clock: Clock):
    event_time = ("et", "0s") if timeout == "EventTimeTimeout" else (None, None)
    op = group_state_operator(counting, ["k"], ["k", "t", "v", "et"], OUTPUT, STATE, timeout, *event_time)
    op.clock = clock
    return op


def test_state_is_kept_per_group_across_batches_and_a_restart(run):
    clock = Clock()
    runner = run(operator("NoTimeout", clock))
    assert output(runner.batch(rows(("a", 1, 1), ("a", 2, 1), ("b", 1, 1)))) == [("a", 2, "rows"), ("b", 1, "rows")]
    runner = run(operator("NoTimeout", clock), runner.version)
    assert output(runner.batch(rows(("a", 3, 1), ("b", 3, -1)))) == [("a", 3, "rows")]
    assert output(runner.batch(rows(("b", 4, 1), ("a", 4, 0)))) == [("b", 1, "rows")]  # b removed, a unchanged
    assert output(runner.batch(rows(("a", 5, 1)))) == [("a", 4, "rows")]


def test_event_time_timeouts_fire_after_the_watermark_passes_them_also_without_data(run):
    runner = run(operator("EventTimeTimeout", Clock()))
    assert output(runner.batch(rows(("a", 100, 1), ("b", 500, 1)))) == [("a", 1, "rows"), ("b", 1, "rows")]
    # the watermark is 500 ms now: a's timeout (110 ms) is before it
    assert output(runner.operator.no_data_batch(runner.view)) == [("a", 1, "timeout")]
    late = runner.batch(rows(("a", 300, 1), ("b", 505, 1)))  # a's row is late (at or before 500 ms)
    assert late.late_rows == 1 and output(late) == [("b", 2, "rows")]
    # b's timeout is 515 ms, the watermark 505 ms: not yet; at 516 ms it is
    assert runner.operator.no_data_batch(runner.view).output.num_rows == 0
    assert output(runner.batch(rows(("c", 516, 1)))) == [("c", 1, "rows")]
    assert output(runner.operator.no_data_batch(runner.view)) == [("b", 2, "timeout")]


def test_a_timed_out_group_that_changes_nothing_times_out_again_as_in_spark(run):
    runner = run(operator("EventTimeTimeout", Clock()))
    runner.batch(rows(("a", 99, 1)))  # timeout at 109 ms; its call leaves the state as it is
    runner.batch(rows(("b", 200, 1)))
    assert output(runner.operator.no_data_batch(runner.view)) == [("a", 1, "timeout")]
    assert output(runner.batch(rows(("b", 300, 1)))) == [("a", 1, "timeout"), ("b", 2, "rows")]


def test_processing_time_timeouts_fire_in_the_first_batch_after_them(run):
    clock = Clock()
    runner = run(operator("ProcessingTimeTimeout", clock))
    runner.batch(rows(("a", 1, 1)))  # timeout at 1005 s
    clock.now = 1005.0
    assert output(runner.batch(rows(("b", 1, 1)))) == [("b", 1, "rows")]  # not before the batch's time
    clock.now = 1005.001
    assert output(runner.batch(rows(("b", 2, 1)))) == [("a", 1, "timeout"), ("b", 2, "rows")]


def test_a_value_is_stored_as_sparks_jvm_converts_it():
    """As Spark 4.3 stores (3, 2.5, True, 1 << 40) for "d double, l long, i int, j int": (None, None, None, 0)."""
    fields = (("d", T.DoubleType()), ("l", T.LongType()), ("i", T.IntegerType()), ("j", T.IntegerType()))
    schema = T.StructType([T.StructField(n, t) for n, t in fields])
    assert stored((3, 2.5, True, 1 << 40), schema) == (None, None, None, 0)
    assert stored((2.5, 3, -7, (1 << 31) + 5), schema) == (2.5, 3, -7, -(1 << 31) + 5)
    with pytest.raises(PySparkValueError, match="has 1 fields"):
        stored((1,), schema)
