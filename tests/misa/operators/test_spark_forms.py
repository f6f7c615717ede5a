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


def test_grouping_by_the_event_time_without_a_window_is_refused():
    with pytest.raises(ValueError, match="grouping by the event-time column 't' without a window"):
        Aggregation(["k", "t"], [Agg("n", "count", "v")], event_time="t", watermark_delay="10s")
    Aggregation(["k"], [Agg("n", "count", "v")], event_time="t", watermark_delay="10s")  # ignored, as Spark does
