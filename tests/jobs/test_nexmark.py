"""Differential tests: NEXMark Q13, Q18, Q19 and Q20 through the runtime equal plain Spark's results.

One generated input (20 s at 200 events/s in 10 files, so 5 batches of two files, 2% bad records)
serves every run; each query's reference (``--mode native``) runs once.
"""

from pathlib import Path

import pytest
from job_helpers import assert_same_output, assert_same_results, metrics, native_output, output_rows, run_in_process

from jobs import nexmark
from jobs.gen.nexmark import generate_nexmark
from jobs.gen.parts import BAD_RECORDS_FILE
from misa.io.quarantine import read_quarantine

QUERIES = ["q13", "q18", "q19", "q20"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("nexmark-input")
    generate_nexmark(
        folder, rate=200, seconds=20, seed=3, files_per_second=0.5, bad_fraction=0.02, side_rows=1000, progress=False
    )
    return folder


@pytest.fixture(scope="module")
def reference(spark, data, tmp_path_factory):
    """Plain Spark's final results and output rows per query, computed once."""
    cache: dict = {}

    def get(query: str) -> tuple[dict, Path]:
        if query not in cache:
            run_dir = tmp_path_factory.mktemp(f"native-{query}")
            cache[query] = run_in_process(spark, nexmark, query, "native", data, run_dir), run_dir
        return cache[query]

    return get


def assert_equals_native(spark, reference, query: str, mode: str, data: Path, run_dir: Path) -> None:
    """The query's run in ``mode`` has native's final results and its rows: Q13's whatever the batch (native Q13 is
    one batch job over the whole input), the others' batch by batch (Q18, Q19: every key with input in a batch, as
    Spark's update output)."""
    final, native = reference(query)
    assert_same_results(run_in_process(spark, nexmark, query, mode, data, run_dir), final)
    if query == "q13":
        assert output_rows(run_dir) == output_rows(native)
    else:
        assert_same_output(run_dir, native_output(native))


@pytest.mark.parametrize(
    "query,mode",
    # -m slow (the suite's time): make test runs Nexmark's operators in tests/misa/operators/test_nexmark_ops.py
    [pytest.param(q, m, marks=pytest.mark.slow) for q in QUERIES for m in ("sync", "misa")],
)
def test_query_equals_native(spark, data, reference, tmp_path, query, mode):
    assert_equals_native(spark, reference, query, mode, data, tmp_path)
    bad = (data / BAD_RECORDS_FILE).read_bytes().decode().split("\n")[:-1]
    assert sorted(read_quarantine(tmp_path / "ckpt" / "quarantine")) == sorted(bad)
    records = metrics(tmp_path)
    assert len(records) == 5 and sum(r["bad_records"] for r in records) == len(bad)


@pytest.mark.slow  # make test runs two worker processes in test_differential.py (a join)
@pytest.mark.parametrize("query", QUERIES)
def test_query_in_two_worker_processes_equals_native(spark, data, reference, tmp_path, session_conf, query):
    """Q13's lookup join (the side table in each partition), Q18/Q19's top n and Q20's keyed join split their state
    into two key partitions, each in its worker; the results do not change."""
    session_conf({"spark.misa.state.processes": "2"})
    assert_equals_native(spark, reference, query, "misa", data, tmp_path)
    assert (tmp_path / "ckpt" / "misa-state" / "partitions.json").exists()


@pytest.mark.parametrize(
    "query,processes",
    [pytest.param(q, p, marks=pytest.mark.slow) for p in (1, 2) for q in QUERIES],
)
def test_query_with_prefetching_equals_native(spark, data, reference, tmp_path, session_conf, query, processes):
    """Every query's operator names its keys one stage early; prefetching them changes no result (with two worker
    processes, each prefetches the keys of its partition's hint rows)."""
    session_conf({"spark.misa.prefetch.enabled": "true", "spark.misa.state.processes": str(processes)})
    assert_equals_native(spark, reference, query, "misa", data, tmp_path)
    prefetch = [r["prefetch"] for r in metrics(tmp_path)]
    assert all(p is not None for p in prefetch) and sum(p["hinted"] for p in prefetch) > 0
    # each hinted key was fetched ahead of its read or found cached already (Q13's side table stays cached)
    assert sum(p["prefetch_hits"] + p["hints_renewed"] for p in prefetch) > 0


@pytest.mark.slow  # the suite's time (each Python source adds ~1.5 s to a query's start)
def test_reference_is_not_trivial(reference):
    """Each query's reference has enough rows and (q19) full top 10s to make the comparison meaningful."""
    sizes = {query: len(reference(query)[0]) for query in QUERIES}
    assert all(size >= 100 for size in sizes.values()), sizes
    assert max(rank for _, rank in reference("q19")[0]) == nexmark.TOP_N
    assert {row["category"] for row in reference("q20")[0].values()} == {nexmark.Q20_CATEGORY}


def test_output_mode_is_the_query_own(capsys):
    with pytest.raises(SystemExit):
        nexmark.parse_args(
            ["--query", "q19", "--output-mode", "append", "--input", "i", "--output", "o", "--checkpoint", "c"]
        )
    assert "supports --output-mode update only" in capsys.readouterr().err
    assert (
        nexmark.parse_args(["--query", "q20", "--input", "i", "--output", "o", "--checkpoint", "c"]).output_mode
        == "append"
    )
