"""Left outer, right outer, full outer and left semi stream-stream joins through misa.from_query and through plain
Spark, compared batch id by batch id (verify/differential/scenarios.py): matched rows, rows that never match (an
outer join's come out padded with nulls in the batch Spark evicts them, often one without data), late rows and
restarts; a left semi join's left row comes out once, on its first match."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.verify.test_spark_sources import files, rows
from verify.differential.scenarios import Round, Rows, Scenario, drifting_rows, run_scenario

HOWS = ("left_outer", "right_outer", "full_outer", "left_semi")
BOUNDS = "clickTime >= impressionTime AND clickTime <= impressionTime + interval 1 minute"


def joined(how: str, condition: str = BOUNDS, delays: tuple[str, str] = ("10 seconds", "20 seconds")):
    """The guide's impressions and clicks joined ``how`` on the ad and ``condition``."""

    def build(spark: SparkSession, inputs: Path) -> DataFrame:
        impressions = (
            files(spark, inputs / "impressions")
            .select(F.col("k").alias("adId"), F.col("t").alias("impressionTime"), F.col("v").alias("iv"))
            .withWatermark("impressionTime", delays[0])
        )
        clicks = (
            files(spark, inputs / "clicks")
            .select(F.col("k").alias("clickAdId"), F.col("t").alias("clickTime"), F.col("v").alias("cv"))
            .withWatermark("clickTime", delays[1])
        )
        return impressions.join(clicks, F.expr(f"clickAdId = adId AND {condition}"), how)

    return build


# Batch 0: ads 1 and 3 match (3 twice), impression 2 and clicks 9 and 10 do not yet. The watermark (the minimum,
# 20 s) evicts click 1 (matched) in batch 1, without data. After the restart, impression 6 and click 7 are late;
# impression 10 meets the stored click 10; the watermark (130 s) evicts impression 2 and click 9, unmatched.
ROUNDS = (
    Round(
        files=(
            ("impressions/0.json", rows((10, 1), (20, 2), (30, 3))),
            ("clicks/0.json", rows((15, 1), (50, 3), (55, 3), (40, 9), (60, 10))),
        )
    ),
    Round(
        files=(
            ("impressions/1.json", rows((100, 4), (200, 5), (15, 6), (50, 10))),
            ("clicks/1.json", rows((110, 4), (10, 7), (150, 8))),
        )
    ),
)


def random_rounds(seed: int, rounds: int = 3) -> tuple[Round, ...]:
    """Rounds of drifting rows (some out of order, some late), each side's to its folder, a file per batch."""
    batches = drifting_rows(seed, 3 * rounds, 24, keys=5, values=100, step_s=2.0, late_s=40)
    out = []
    for number in range(rounds):
        written: list[tuple[str, Rows]] = []
        for index, batch in enumerate(batches[3 * number : 3 * number + 3]):
            for side, folder in enumerate(("impressions", "clicks")):
                chosen = tuple(r for r in batch if r["side"] == side)
                written.append((f"{folder}/{number}-{index}.json", rows(*((int(r["t"]), r["k"]) for r in chosen))))
        out.append(Round(files=tuple(written)))
    return tuple(out)


def scenario(how: str, rounds: tuple[Round, ...] = ROUNDS, **options) -> Scenario:
    return Scenario(how, options.pop("build", joined(how)), "append", rounds, **options)


@pytest.mark.slow  # about 2 minutes a join type on a quiet machine (two engines, two rounds): on demand
@pytest.mark.parametrize("how", HOWS)
def test_sparks_rows_batch_by_batch(spark, tmp_path: Path, how: str):
    outcome = run_scenario(spark, scenario(how), tmp_path)
    assert outcome.ok and outcome.spark_rows, f"{how}: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("seed", [1, 2])
def test_drifting_rows_with_restarts(spark, tmp_path: Path, how: str, seed: int):
    outcome = run_scenario(spark, scenario(how, random_rounds(seed)), tmp_path)
    assert outcome.ok and outcome.spark_rows, f"{how}, seed {seed}: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
def test_max_watermark_policy(spark, tmp_path: Path, how: str):
    policy = {"spark.sql.streaming.multipleWatermarkPolicy": "max"}
    outcome = run_scenario(spark, scenario(how, random_rounds(3), session_conf=policy), tmp_path)
    assert outcome.ok and outcome.spark_rows, f"{how}: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
def test_joined_on_the_event_time(spark, tmp_path: Path, how: str):
    """The event times among the keys: Spark evicts both sides' state by key."""
    build = joined(how, "clickTime = impressionTime")
    rounds = (
        Round(files=(("impressions/0.json", rows((10, 1), (20, 2))), ("clicks/0.json", rows((10, 1), (21, 2))))),
        Round(files=(("impressions/1.json", rows((100, 3), (5, 4))), ("clicks/1.json", rows((100, 3), (120, 5))))),
    )
    outcome = run_scenario(spark, scenario(how, rounds, build=build), tmp_path)
    assert outcome.ok and outcome.spark_rows, f"{how}: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
def test_a_predicate_of_both_sides_values(spark, tmp_path: Path, how: str):
    """A condition of both sides' values besides the time bounds: a pair that fails it is no match."""
    build = joined(how, f"{BOUNDS} AND cv > iv + 10")
    outcome = run_scenario(spark, scenario(how, random_rounds(4, rounds=2), build=build), tmp_path)
    assert outcome.ok and outcome.spark_rows, f"{how}: {outcome}"


@pytest.mark.parametrize("how", ["left_outer", "full_outer"])
def test_refused_without_a_time_bound(spark, tmp_path: Path, how: str):
    """Spark refuses an outer join whose state it could never evict, and misa with it."""
    outcome = run_scenario(spark, scenario(how, ROUNDS[:1], build=joined(how, "true")), tmp_path)
    assert outcome.refused == "Spark", outcome


@pytest.mark.slow
@pytest.mark.parametrize("how", HOWS)
def test_rows_with_null_keys(spark, tmp_path: Path, how: str):
    """Rows without a key on both sides: a preserved side's come out with nulls when evicted, as Spark's do."""
    rounds = (
        Round(files=(("impressions/0.json", rows((10, None), (20, 1))), ("clicks/0.json", rows((15, None), (25, 1))))),
        Round(files=(("impressions/1.json", rows((200, 2))), ("clicks/1.json", rows((210, None), (220, 2))))),
    )
    outcome = run_scenario(spark, scenario(how, rounds), tmp_path)
    assert outcome.ok and outcome.spark_rows, f"{how}: {outcome}"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["left_outer", "left_semi"])
def test_in_worker_processes(spark, tmp_path: Path, how: str):
    """The state in two worker processes (rows routed by the join key), a restart between rounds."""
    conf = {"spark.misa.state.processes": "2"}
    outcome = run_scenario(spark, scenario(how, random_rounds(5, rounds=2), conf=conf), tmp_path)
    assert outcome.ok and outcome.spark_rows, f"{how}: {outcome}"


@pytest.mark.slow  # about 15 s (two engines, a query each): over the default suite's budget
def test_left_semi_runs_the_batchs_right_rows_first(spark, tmp_path: Path):
    """Spark 4.3's left semi join meets a batch's right rows with the stored left rows before it meets its left rows
    (SPARK-55973): a click its state watermark evicts in its own batch (60 s, behind the 90 s of batch 0) is not stored,
    so the impression of that batch (50 s) is no match; a click it keeps (100 s) matches its batch's impression (95 s),
    and a click (150 s) the impression stored by batch 0 (110 s). Two files a side, a batch each, back to back."""
    first = (("impressions/0.json", rows((100, 1), (110, 4))), ("clicks/0.json", rows((120, 1))))
    second = (("impressions/1.json", rows((50, 2), (95, 3))), ("clicks/1.json", rows((60, 2), (100, 3), (150, 4))))
    outcome = run_scenario(spark, scenario("left_semi", (Round(files=first + second),)), tmp_path)
    assert outcome.ok and outcome.spark_rows, outcome
