"""Aggregations written in forms misa's docs accept run in Spark, and forms misa does not run are refused at once."""

import pytest
from pyspark.sql import functions as F

from misa.operators.aggregation import Agg, Aggregation


@pytest.mark.parametrize("window,slide", [("10s", None), ("10s", "5s"), ("0.5 min", "10 sec"), ("10 seconds", None)])
def test_every_duration_form_misa_accepts_runs_in_sparks_window(spark, window, slide):
    op = Aggregation(["k"], [Agg("n", "count", "v")], event_time="t", window=window, slide=slide)
    rows = spark.createDataFrame([(1, 5, 1)], "k long, s long, v long").withColumn("t", F.timestamp_seconds("s"))
    deltas = op.deltas(rows).toArrow()
    assert deltas.num_rows == 1 and deltas["_rows"].to_pylist() == [1]


def test_a_windowed_aggregation_without_a_watermark_runs_with_a_warning_but_not_in_append_output(caplog):
    Aggregation(["k"], [Agg("n", "count", "v")], event_time="t", window="10s", watermark_delay=None)
    assert "keeps every window of '10s' forever" in caplog.text and "grows without bound" in caplog.text
    with pytest.raises(ValueError, match="append output needs a watermark: give watermark_delay"):
        Aggregation(["k"], [Agg("n", "count", "v")], "t", "10s", watermark_delay=None, output_mode="append")


def test_grouping_by_the_event_time_without_a_window_judges_each_group_by_its_time(spark, run):
    """Each group's time is its instant: the watermark (delay 10 s) drops rows at or before it and evicts the groups
    at or before it, append output emitting them then; a null time is never judged."""
    op = Aggregation(["k", "t"], [Agg("n", "count", "v")], event_time="t", watermark_delay="10s", output_mode="append")
    schema = "k long, s long, v long"

    def deltas(rows):
        frame = spark.createDataFrame(rows, schema).withColumn("t", F.timestamp_seconds("s")).drop("s")
        return op.deltas(frame).toArrow()

    runner = run(op)
    first = runner.batch(deltas([(1, 5, 1), (1, 5, 2), (2, 30, 3), (3, None, 4)]))  # watermark 0: nothing closes
    assert first.output.num_rows == 0
    # late rows by the batch before's watermark (0), eviction by this one's (20 s): t = 5 s and the new t = 20 s close
    second = runner.batch(deltas([(1, 20, 5), (1, 5, 6)]))
    assert sorted((r["k"], r["n"]) for r in second.output.to_pylist()) == [(1, 1), (1, 3)]
    third = runner.batch(deltas([(1, 20, 7), (2, 31, 8)]))  # t = 20 s is at the watermark: late, dropped
    assert third.late_rows == 1 and third.output.num_rows == 0
    assert Aggregation(["k"], [Agg("n", "count", "v")], event_time="t", watermark_delay="10s").time_keyed is False
