"""A filter on a join side's event time after its ``withWatermark`` (issue 63, item 6): Spark's watermark counts the
rows the filter drops (its optimizer leaves a filter on the event time above ``EventTimeWatermark``), so a row the
filter drops still moves the watermark, evicts state and makes later rows late. Each query through misa.from_query and
plain Spark, batch id by batch id."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from verify.differential.scenarios import Round, Scenario, run_scenario

SCHEMA = "t timestamp, k int, v bigint"
CUT_S = 500  # the filter keeps the rows before it


def rows(*events: tuple[int, int]) -> tuple[dict, ...]:
    return tuple({"t": t, "k": k, "v": t} for t, k in events)


def side(spark: SparkSession, path: Path, prefix: str, delay: str) -> DataFrame:
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(path))
    events = events.select(F.col("k").alias(f"{prefix}Id"), F.col("t").alias(f"{prefix}Time"))
    return events.withWatermark(f"{prefix}Time", delay)


def filtered_join(spark: SparkSession, inputs: Path, how: str, filtered: str) -> DataFrame:
    """Impressions and clicks joined within a minute; side ``filtered`` keeps only its rows before ``CUT_S``
    seconds, by a filter on its event time after its ``withWatermark``."""
    sides = {
        "impression": side(spark, inputs / "impressions", "impression", "10 seconds"),
        "click": side(spark, inputs / "clicks", "click", "20 seconds"),
    }
    sides[filtered] = sides[filtered].where(F.col(f"{filtered}Time") < F.timestamp_seconds(F.lit(CUT_S)))
    condition = (
        "clickId = impressionId AND clickTime >= impressionTime AND clickTime <= impressionTime + interval 1 minute"
    )
    return sides["impression"].join(sides["click"], F.expr(condition), how)


def rounds(filtered: str) -> tuple[Round, ...]:
    """Batch 0: the filtered side's row at 1,000 s, which its filter drops, moves its watermark to 990 s (or 980 s);
    batch 1 moves the other side's to 980 s (or 990 s). Spark's watermark is then 980 s: the impressions without a
    click come out of the left outer join, and batch 2's pair is late. A watermark of the kept rows only (120 s)
    would keep them."""
    other = "click" if filtered == "impression" else "impression"
    first = {
        "impressions/0.json": rows((100, 1), (120, 4)),
        "clicks/0.json": rows((105, 1)),
        "impressions/1.json": rows((130, 5)),
        "clicks/1.json": rows((135, 6)),
        "impressions/2.json": rows((150, 3)),
        "clicks/2.json": rows((155, 3)),
    }
    first[f"{filtered}s/0.json"] += rows((1000, 2))
    first[f"{other}s/1.json"] += rows((1000, 0))
    return (Round(files=tuple(first.items())),)


CASES = {
    "left outer, the impressions filtered": ("left_outer", "impression"),
    "inner, the clicks filtered": ("inner", "click"),
    "right outer, the impressions filtered": ("right_outer", "impression"),
}
SLOW = {"inner, the clicks filtered", "right outer, the impressions filtered"}  # make test's time


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in CASES])
def test_a_filter_on_a_sides_event_time_after_its_watermark_gives_sparks_batches(spark, tmp_path: Path, name: str):
    how, filtered = CASES[name]
    scenario = Scenario(name, lambda s, inputs: filtered_join(s, inputs, how, filtered), "append", rounds(filtered))
    outcome = run_scenario(spark, scenario, tmp_path)
    assert outcome.ok, f"{name}: {outcome}"
    assert outcome.spark_rows > 0
