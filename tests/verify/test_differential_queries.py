"""Queries written in Spark's DataFrame API, through misa.from_query and through plain Spark, batch by batch: fixed
cases of each form, then a slice of the random ones (`misa fuzz --from-query` runs more; docs/spark-queries.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from misa.runtime.batch_hints import HintSession
from misa.runtime.watermark_sync import WatermarkSync
from verify.differential.cases import Case, Query, Settings
from verify.differential.queries import (
    MOMENT_FUNCTIONS,
    REFUSED_CHAINS,
    REFUSED_OVERFLOW,
    REFUSED_UNWATERMARKED_BELOW_JOIN,
    expected_refusals,
    query_case_of,
    random_query_case,
)
from verify.differential.runner import Refused, run_case

OBJECTS = ("first", "last", "collect_list", "collect_set", "approx_count_distinct")
CASES = {
    "tumbling window with a start time, complete output, count(*), decimal sums and averages, a select after": (
        Query(
            "tumbling",
            {"k0": "string"},
            ("sum", "avg", "max"),
            "decimal(12,2)",
            10,
            10,
            2,
            "complete",
            start_s=3,
            count_star=True,
            above=True,
        ),
        Settings(processes=2),
    ),
    "session windows with a gap per row, append output, first/last/collect_set of doubles": (
        Query(
            "session",
            {"k0": "bigint"},
            ("first", "last", "collect_set"),
            "double",
            5,
            delay_s=2,
            output_mode="append",
            dynamic_gap=True,
        ),
        Settings(prefetching="true"),
    ),
    "dropDuplicatesWithinWatermark, update output, two worker processes": (
        Query("dedup_within", {"k0": "double", "k1": "boolean"}, delay_s=2, output_mode="update"),
        Settings(processes=2, commit_mode="sync"),
    ),
    "sliding windows without a watermark": (
        Query("sliding", {"k0": "int"}, ("sum", "count"), "double", 10, 5, output_mode="update", watermark=False),
        Settings(),
    ),
    "sliding windows with a start time, complete output, two worker processes": (
        Query("sliding", {"k0": "string"}, ("avg", "max"), "bigint", 10, 4, 2, "complete", start_s=3),
        Settings(processes=2),
    ),
    "dropDuplicates with the event time, append output": (
        Query("dedup_time", {"k0": "timestamp"}, delay_s=5, output_mode="append"),
        Settings(commit_mode="async-ckpt"),
    ),
    "no window, complete output, min/max of booleans, approx_count_distinct": (
        Query("global", {"k0": "date"}, ("min", "max", "approx_count_distinct"), "boolean", output_mode="complete"),
        Settings(),
    ),
    "inner stream-stream join within an interval, a predicate of both sides, the right side filtered": (
        Query(
            "stream_join",
            {"k0": "string"},
            delay_s=2,
            output_mode="append",
            join_shape="interval",
            right_delay_s=5,
            residual=True,
            right_filter=True,
            above=True,
        ),
        Settings(processes=2),
    ),
    "inner stream-stream join on the event time, all columns of both sides (shared names)": (
        Query("stream_join", {"k0": "double"}, ("sum",), "decimal(12,2)", output_mode="append", join_shape="key_time"),
        Settings(commit_mode="sync"),
    ),
    "tumbling windows: stddev, variance, expressions over aggregates, a time filter, append output": (
        Query(
            "tumbling",
            {"k0": "string"},
            ("stddev", "var_pop", "sum"),
            "double",
            10,
            delay_s=2,
            output_mode="append",
            over_aggregates=True,
            time_filter=True,
        ),
        Settings(),
    ),
    "sliding windows: the six stddev and variance functions, update output, two worker processes": (
        Query("sliding", {"k0": "int"}, MOMENT_FUNCTIONS, "bigint", 10, 5, 2, "update"),
        Settings(processes=2),
    ),
    "sliding windows with a start time and a filter on the event time, variance, append output": (
        Query(
            "sliding",
            {"k0": "string"},
            ("var_samp", "count"),
            "double",
            10,
            5,
            5,
            "append",
            start_s=3,
            time_filter=True,
        ),
        Settings(prefetching="true"),
    ),
    "no window, complete output: stddev_pop of decimals, expressions over aggregates, a time filter": (
        Query(
            "global",
            {"k0": "bigint"},
            ("stddev_pop", "max"),
            "decimal(12,2)",
            output_mode="complete",
            over_aggregates=True,
            time_filter=True,
        ),
        Settings(),
    ),
    "no window and no group columns, update output, a time filter: the one group in batches without data": (
        Query("global", {}, ("sum", "stddev_pop"), "double", delay_s=2, output_mode="update", time_filter=True),
        Settings(),
    ),
    "session windows, variance of integers, a select after": (
        Query(
            "session", {"k0": "string"}, ("variance", "count"), "bigint", 5, delay_s=2, output_mode="append", above=True
        ),
        Settings(),
    ),
    "session windows, expressions over min/max of strings, complete output": (
        Query(
            "session", {"k0": "bigint"}, ("min",), "string", 5, delay_s=2, output_mode="complete", over_aggregates=True
        ),
        Settings(),
    ),
    "session windows after a filter on the event time, max_by, append output": (
        Query("session", {"k0": "string"}, ("count", "max_by"), "bigint", 5, 5, 2, "append", time_filter=True),
        Settings(),
    ),
    "dropDuplicatesWithinWatermark after a filter on the event time, two worker processes": (
        Query("dedup_within", {"k0": "int"}, delay_s=5, output_mode="append", time_filter=True),
        Settings(processes=2),
    ),
    "sliding windows: max_by, min_by and approx_count_distinct of strings, a start time, update output": (
        Query(
            "sliding", {"k0": "bigint"}, ("max_by", "min_by", "approx_count_distinct"), "string", 10, 4, 2, start_s=1
        ),
        Settings(prefetching="true"),
    ),
}
SLICE = [0, *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(1, 12))]


@pytest.mark.slow  # make test runs seed 0 below, the deployments slice and the query shapes' finding 6
@pytest.mark.parametrize("name", list(CASES))
def test_each_form_gives_sparks_rows_and_types(spark, tmp_path, name):
    query, settings = CASES[name]
    case = query_case_of(query, settings, seed=13)
    mismatch = run_case(spark, case, tmp_path / "run")
    assert mismatch is None, f"{case.describe()}\n{mismatch}"


@pytest.mark.slow  # the state on the executors: on demand, with tests/jobs/test_executor_placement.py
def test_a_query_with_its_state_on_the_executors_gives_sparks_rows(spark, tmp_path):
    """The operator's output stays on the state host; the query's select runs on it in Spark, read from the host."""
    query, _ = CASES[
        "tumbling window with a start time, complete output, count(*), decimal sums and averages, a select after"
    ]
    case = query_case_of(query, Settings(placement="executors", prefetching="true"), seed=13)
    mismatch = run_case(spark, case, tmp_path / "run")
    assert mismatch is None, f"{case.describe()}\n{mismatch}"


@pytest.mark.parametrize("seed", SLICE)
def test_random_queries_give_sparks_rows_and_types(spark, tmp_path, seed):
    case = random_query_case(seed)
    mismatch = run_case(spark, case, tmp_path / "run")
    assert mismatch is None, f"{case.describe()}\n{mismatch}"


def test_a_query_spark_refuses_at_start_is_refused_by_misa_too_not_reported_as_a_mismatch(spark, tmp_path):
    """Seed 10000 draws a left outer join of two streams without a watermark, which Spark refuses at start: the
    case is Spark's refusal (misa refused it too), counted apart from the mismatches."""
    case = random_query_case(10000)
    assert case.query.join_how == "left_outer" and not case.query.watermark
    outcome = run_case(spark, case, tmp_path / "run")
    assert isinstance(outcome, Refused) and outcome.by == "Spark", outcome
    assert "not supported without a watermark" in outcome.message


def test_a_join_above_deduplications_without_the_right_sides_watermark_is_an_expected_refusal(spark, tmp_path):
    """Seed 60347 draws an inner join above dropDuplicates of both sides, the right without a watermark: Spark runs
    it; misa refuses it at start (its join would read the deduplication's watermark, Spark's the other side's), and
    the case checks that refusal's message rather than counting it as unexpected."""
    case = random_query_case(60347)
    assert case.query.chain == "dedup_both" and not case.query.watermark
    assert expected_refusals(case.query) == (REFUSED_UNWATERMARKED_BELOW_JOIN,)
    assert run_case(spark, case, tmp_path / "run") is None


def test_a_query_misa_refuses_for_two_reasons_is_refused_with_either_message(spark, tmp_path):
    """Seed 70672 draws a try_sum of decimals that can overflow in a window below dropDuplicatesWithinWatermark:
    misa refuses it for both reasons and names the chain's, the first it meets; the case expects either message."""
    case = random_query_case(70672)
    assert expected_refusals(case.query) == (REFUSED_OVERFLOW, REFUSED_CHAINS["within_above"])
    assert run_case(spark, case, tmp_path / "run") is None


def test_aggregates_no_step_reads_are_dropped_as_sparks_optimizer_drops_them(spark, tmp_path):
    """misa fuzz --from-query --seed 70722, shrunk: first(v) beside min_by(v, o, 3) and vector_sum, then a select of
    the first alone. Spark's optimizer drops the two nothing reads, and its hash aggregation takes a key's rows in
    order; misa computed all three, so its batch's aggregation was sort-based, which reorders a key's rows (a null key
    among them): first(v) was 2, not 1."""
    query = Query("global", {"k0": "date"}, ("first", "vector_sum", "min_by_k"), "bigint", 10, 10, 2, "complete")
    settings = Settings(commit_mode="sync", prefetching="true", shards=4, processes=2)
    rows = ({"k0": "2024-02-29", "t": 11746, "v": 1}, {"k0": "2024-02-29", "t": 18263, "v": 2})
    rows += ({"k0": None, "t": 18227, "v": 100},)
    case = replace(query_case_of(replace(query, above=True), settings, 70722), rounds=(((rows),),))
    assert run_case(spark, case, tmp_path / "run") is None


# misa fuzz --from-query --seed 9522, shrunk: dropDuplicates by a key and the event time with prefetching, restarted
# between rounds. Whether Spark's watermark moves after batch 0 was read before the batch's hint job had run (the
# job whose watermark node saw the rows), so no batch without data was asked for and round 2's row came a batch
# early.
WATERMARK_READ_BEFORE_THE_HINTS = {
    "seed": 9522,
    "query": {
        "operator": "dedup_time",
        "keys": {"k0": "double"},
        "functions": ["avg"],
        "value_type": "bigint",
        "window_s": 10,
        "slide_s": 10,
        "delay_s": 10,
        "output_mode": "update",
        "interval_s": 10,
        "start_s": 0,
        "count_star": False,
        "above": False,
        "dynamic_gap": False,
        "watermark": True,
        "join_shape": "interval",
        "right_delay_s": 0,
        "residual": False,
        "right_filter": False,
        "join_how": "inner",
        "over_aggregates": False,
        "time_filter": False,
        "key_expressions": False,
        "struct_keys": False,
        "union": False,
    },
    "settings": {
        "commit_mode": "misa",
        "prefetching": "true",
        "shards": 1,
        "cache_max_bytes": 1048576,
        "processes": 1,
        "from_query": True,
        "placement": "driver",
    },
    "rounds": [
        [
            [
                {"k0": 1.5, "t": 16243, "v": 7},
                {"k0": None, "t": 11358, "v": -3},
                {"k0": -1e300, "t": 16457, "v": None},
                {"k0": 1.5, "t": 17372, "v": 1},
            ]
        ],
        [[{"k0": 1.5, "t": 18938, "v": None}]],
        [[{"k0": -1e300, "t": 36529, "v": None}]],
    ],
}


def test_spark_watermark_is_read_after_the_batchs_hint_job_ran(spark, tmp_path, monkeypatch):
    """The same case in this test session's warm Spark, where the jobs may end in either order: each batch reads
    whether Spark's watermark moves only after its hint session's wait (the hint job ran), and the rows are
    Spark's."""
    calls: list[str] = []
    wait, read = HintSession.wait, WatermarkSync.read_spark_moved
    monkeypatch.setattr(HintSession, "wait", lambda self: (calls.append("wait"), wait(self))[1])
    monkeypatch.setattr(WatermarkSync, "read_spark_moved", lambda self: (calls.append("read"), read(self))[1])
    case = Case.from_json(json.dumps(WATERMARK_READ_BEFORE_THE_HINTS))
    assert run_case(spark, case, tmp_path / "run") is None
    reads = [i for i, call in enumerate(calls) if call == "read"]
    assert reads and all(calls[i - 1] == "wait" for i in reads), calls


@pytest.mark.slow  # a new process and its JVM: 20 s of the suite's time (CI's 600 s); run on demand
def test_spark_watermark_is_read_after_every_job_of_the_batch_ran(tmp_path):
    """Replayed as the fuzz ran it, in a new process (in this test session's warm Spark the jobs end in another
    order and the early read was right by chance)."""
    case = tmp_path / "case.json"
    case.write_text(json.dumps(WATERMARK_READ_BEFORE_THE_HINTS))
    command = ["fuzz", "--from-query", "--replay", str(case), "--no-shrink", "--work", str(tmp_path / "work")]
    run = subprocess.run([sys.executable, "-m", "misa.cli.main", *command], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "same as Spark" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
