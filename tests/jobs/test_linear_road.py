"""Differential tests: LR2 and LR4 through the runtime equal plain Spark's results, bad input quarantined.

Every comparison is of the whole output (every row of every batch, as a multiset). The
failure-injection test kills the driver (spark-submit in a subprocess) during the commit of the
second version of LR2, restarts it with the same command and expects exactly the reference's
output and quarantine: nothing lost, nothing twice.
"""

from collections import Counter
from pathlib import Path

import pytest
from job_helpers import assert_same_output, metrics, output, run_in_process, spark_submit

from jobs import linear_road
from jobs.gen.lr import generate_lr
from jobs.gen.parts import BAD_RECORDS_FILE
from misa.io.quarantine import read_quarantine
from verify.output_diff import Output

QUERIES = ["lr2", "lr4"]


def generate(folder: Path, bad_fraction: float) -> Path:
    """About 60 vehicles over 150 s of reports, in 10 files (5 batches of two files)."""
    generate_lr(folder, rate=2, seconds=150, seed=7, files_per_second=1 / 15, bad_fraction=bad_fraction, progress=False)
    return folder


@pytest.fixture(scope="module")
def good_data(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("lr-input"), 0.0)


@pytest.fixture(scope="module")
def bad_data(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("lr-bad-input"), 0.1)


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """Plain Spark's whole output per (query, input), computed once."""
    cache: dict = {}

    def get(query: str, data: Path) -> Output:
        if (query, data) not in cache:
            run_dir = tmp_path_factory.mktemp(f"native-{query}")
            run_in_process(spark, linear_road, query, "native", data, run_dir)
            cache[query, data] = output(run_dir)
        return cache[query, data]

    return get


def bad_lines(data: Path) -> list[str]:
    """The exact lines the generator spoiled."""
    return (data / BAD_RECORDS_FILE).read_bytes().decode().split("\n")[:-1]


@pytest.mark.parametrize(
    "query,mode",
    [  # LR2 in misa mode runs in make test as the bad-records test, which equals native over the good records
        pytest.param(q, m, marks=pytest.mark.slow) for q in QUERIES for m in ("sync", "misa")
    ],
)
def test_equals_native(spark, good_data, reference, tmp_path, query, mode):
    run_in_process(spark, linear_road, query, mode, good_data, tmp_path)
    assert_same_output(tmp_path, reference(query, good_data))
    assert sum(r["bad_records"] for r in metrics(tmp_path)) == 0
    assert not (tmp_path / "ckpt" / "quarantine").exists()


@pytest.mark.slow  # a check of the reference itself (10 s of plain Spark): on demand
def test_lr2_pairs_each_report_with_the_previous_one(reference, good_data):
    rows = list(reference("lr2", good_data).rows.elements())
    assert len(rows) > 100
    assert all(time - prev_time == 30 for _, _, time, prev_time, *_ in rows)  # (batch_id, vid, time, prev_time, ...)


# on demand (make test's time): the documented bad-record reading (tests/test_extending.py) and the quarantine's own
# tests run in make test; the soak runs LR2 through kills
@pytest.mark.slow
@pytest.mark.parametrize("query,mode", [("lr2", "misa"), ("lr4", "sync")])
def test_bad_records_are_quarantined_and_the_rest_equals_native(spark, bad_data, reference, tmp_path, query, mode):
    run_in_process(spark, linear_road, query, mode, bad_data, tmp_path)
    assert_same_output(tmp_path, reference(query, bad_data))
    expected = bad_lines(bad_data)
    assert len(expected) > 10
    assert Counter(read_quarantine(tmp_path / "ckpt" / "quarantine")) == Counter(expected)
    assert sum(r["bad_records"] for r in metrics(tmp_path)) == len(expected)


def test_lr2_output_mode_must_be_append():
    with pytest.raises(SystemExit):
        linear_road.parse_args(
            ["--query", "lr2", "--input", "i", "--output", "o", "--checkpoint", "c", "--output-mode", "update"]
        )
    assert (
        linear_road.parse_args(["--query", "lr4", "--input", "i", "--output", "o", "--checkpoint", "c"]).output_mode
        == "update"
    )


@pytest.mark.slow  # a spark-submit killed and restarted: the kill tests run with -m slow, the soak covers them
def test_kill_during_commit_then_restart_is_exactly_once(bad_data, reference, tmp_path):
    killed = spark_submit(
        linear_road, "lr2", "misa", bad_data, tmp_path, failpoints="ckpt.after_local_checkpoint=kill(3)"
    )
    assert killed.returncode == 128 + 9, killed.stderr[-3000:]
    assert "failpoint ckpt.after_local_checkpoint: killing process" in killed.stdout
    done = spark_submit(linear_road, "lr2", "misa", bad_data, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_output(tmp_path, reference("lr2", bad_data))
    assert Counter(read_quarantine(tmp_path / "ckpt" / "quarantine")) == Counter(bad_lines(bad_data))
