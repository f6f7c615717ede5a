"""misa against plain Spark, batch by batch: the issue's findings as fixed cases, then a fixed-seed random slice.

Every case runs through misa and through the same query in plain Spark (one local session), with a round's
files back to back and a restart between rounds (:mod:`verify.differential.runner`); ``misa fuzz`` runs more.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from verify.differential.cases import KEY_TYPES, OPERATORS, PREFETCHING, Case, Query, Settings, case_of, random_case
from verify.differential.runner import compare, run_case

SLOW = pytest.mark.slow
SLICE = [pytest.param(seed, marks=SLOW) for seed in (0, 1, 2, 3)]  # the suite's time: on demand; `misa fuzz` any


def case(query: Query, *rounds: list[list[dict]], settings: Settings = Settings()) -> Case:
    return Case(0, query, settings).with_rounds([list(r) for r in rounds])


def rows(*triples: tuple) -> list[dict]:
    """(k, t in seconds, v) rows of one file."""
    return [{"k": k, "t": t * 1000, "v": v} for k, t, v in triples]


def assert_same_as_spark(spark, tmp_path, c: Case) -> None:
    mismatch = run_case(spark, c, tmp_path / "run")
    assert mismatch is None, f"{c.describe()}\n{mismatch}"


@pytest.mark.parametrize(  # make test: sliding update (the other three: -m slow)
    "operator,slide,mode",
    [
        (o, s, m) if (o, m) == ("sliding", "update") else pytest.param(o, s, m, marks=SLOW)
        for o, s in (("tumbling", 10), ("sliding", 5))
        for m in ("update", "append")
    ],
)
def test_a_row_late_only_by_the_newest_watermark_counts_when_batches_run_back_to_back(
    spark, tmp_path, operator, slide, mode
):
    """Spark judges batch 2's row at 7 s by batch 1's watermark (5 s), not batch 2's (25 s): [0, 10) sums 1 + 4."""
    query = Query(operator, {"k": "bigint"}, ("sum",), window_s=10, slide_s=slide, delay_s=0, output_mode=mode)
    assert_same_as_spark(spark, tmp_path, case(query, [rows((1, 5, 1)), rows((1, 25, 2)), rows((1, 7, 4))]))


def test_the_self_join_keeps_a_row_late_only_by_the_newest_watermark(spark, tmp_path):
    query = Query("join", {"k": "bigint"}, interval_s=30, delay_s=0, output_mode="append")
    assert_same_as_spark(spark, tmp_path, case(query, [rows((1, 5, 1)), rows((1, 25, 2)), rows((1, 7, 4))]))


@pytest.mark.slow  # the suite's time (each Python source adds ~1.5 s to a query's start)
def test_windows_close_as_spark_closes_them_across_restarts_and_files_fed_one_at_a_time(spark, tmp_path):
    """Rounds of one file: Spark runs a batch without data after each (its rows belong to the file's batch)."""
    query = Query("tumbling", {"k": "bigint"}, ("sum", "count"), window_s=10, delay_s=2, output_mode="append")
    files = [[rows((1, 5, 1))], [rows((1, 25, 2))], [rows((1, 7, 4), (2, 26, 1))], [rows((2, 41, 3))]]
    assert_same_as_spark(spark, tmp_path, case(query, *files))


def test_a_null_join_key_does_not_move_the_watermark(spark, tmp_path):
    """Spark filters null keys below withWatermark: the row at 100 s with no key leaves the watermark at 5 s."""
    query = Query("join", {"k": "bigint"}, interval_s=30, delay_s=0, output_mode="append")
    c = case(query, [rows((1, 5, 1), (None, 100, 2)), rows((1, 8, 3))])
    assert_same_as_spark(spark, tmp_path, c)


def test_minus_zero_and_zero_are_one_join_key_across_batches(spark, tmp_path):
    query = Query("join", {"k": "double"}, interval_s=30, delay_s=10, output_mode="append")
    c = case(query, [rows((-0.0, 5, 1)), rows((0.0, 8, 2)), rows((-0.0, 9, 3), (float("nan"), 9, 4))])
    assert_same_as_spark(spark, tmp_path, c)


@pytest.mark.slow  # the key of every type below runs a boolean key with prefetching in make test
@pytest.mark.parametrize("prefetching", ["true", "auto"])
def test_a_boolean_group_column_runs_with_prefetching(spark, tmp_path, prefetching):
    query = Query("tumbling", {"k": "boolean"}, ("count", "max"), window_s=10, delay_s=0)
    c = case(query, [rows((True, 1, 1), (None, 2, 2)), rows((False, 3, 3))], settings=Settings(prefetching=prefetching))
    assert_same_as_spark(spark, tmp_path, c)


@pytest.mark.slow  # the suite's time
@pytest.mark.parametrize(
    "operator,prefetching", [(o, p) for p in ("true", "false") for o in ("global", "sliding", "tumbling")]
)
def test_no_group_columns(spark, tmp_path, operator, prefetching):
    query = Query(operator, {}, ("sum", "avg"), window_s=10, slide_s=5 if operator == "sliding" else 10, delay_s=0)
    files = [rows((None, 1, 1), (None, 12, 2))], [rows((None, 3, 3)), rows((None, 30, 4))]
    assert_same_as_spark(spark, tmp_path, case(query, *files, settings=Settings(prefetching=prefetching)))


def every_key_type(operator: str) -> Query:
    mode = "append" if operator == "join" else "update"
    return Query(operator, {f"k_{t}": t for t in KEY_TYPES}, ("count", "max"), window_s=10, slide_s=5, output_mode=mode)


@pytest.mark.parametrize(
    "operator,prefetching",  # all on demand: make test's random cases draw the key types
    [pytest.param(o, p, marks=SLOW) for p in PREFETCHING for o in OPERATORS],
)
def test_a_key_of_every_type_through_every_operator(spark, tmp_path, operator, prefetching):
    """One key column of each type (nulls and edge values included)."""
    c = case_of(every_key_type(operator), Settings(prefetching=prefetching, cache_max_bytes=4096), seed=7)
    assert_same_as_spark(spark, tmp_path, c)


@pytest.mark.slow  # 96 cases: each key type alone through every operator and prefetching setting
@pytest.mark.parametrize("key_type", KEY_TYPES)
@pytest.mark.parametrize("prefetching", PREFETCHING)
@pytest.mark.parametrize("operator", OPERATORS)
def test_each_key_type_alone_through_every_operator(spark, tmp_path, operator, prefetching, key_type):
    query = Query(operator, {"k": key_type}, ("sum", "min"), window_s=10, slide_s=5, output_mode="update")
    if operator == "join":
        query = Query(operator, {"k": key_type}, output_mode="append", delay_s=5)
    assert_same_as_spark(spark, tmp_path, case_of(query, Settings(prefetching=prefetching), seed=11))


# on demand (-m slow): make test's random cases draw two worker processes (seed 0 among them) and its local-cluster
# case runs two state partitions; tests/misa/parallel runs the worker processes' parts
@pytest.mark.slow
@pytest.mark.parametrize("operator", OPERATORS)
def test_every_operator_in_two_worker_processes(spark, tmp_path, operator):
    """Two key partitions, each in its worker, prefetching: the rows of two keys (nulls among them) meet in one."""
    query = Query(operator, {"k": "string", "k2": "int"}, ("sum", "max"), window_s=10, slide_s=5, output_mode="update")
    if operator == "join":
        query = Query(operator, {"k": "string"}, output_mode="append", delay_s=5)
    assert_same_as_spark(spark, tmp_path, case_of(query, Settings(prefetching="true", processes=2), seed=5))


@pytest.mark.slow  # the state on the executors: on demand, with tests/jobs/test_executor_placement.py
@pytest.mark.parametrize("operator", OPERATORS)
def test_every_operator_with_its_state_on_the_executors(spark, tmp_path, operator):
    """The state in a state host (a barrier task of the test session), deltas sent to it from Spark's tasks."""
    query = Query(operator, {"k": "string", "k2": "int"}, ("sum", "max"), window_s=10, slide_s=5, output_mode="update")
    if operator == "join":
        query = Query(operator, {"k": "string"}, output_mode="append", delay_s=5)
    settings = Settings(prefetching="true", placement="executors")
    assert_same_as_spark(spark, tmp_path, case_of(query, settings, seed=5))


@pytest.mark.parametrize("seed", SLICE)
def test_random_cases_give_sparks_rows_and_types(spark, tmp_path, seed):
    assert_same_as_spark(spark, tmp_path, random_case(seed))


def test_the_comparison_finds_a_changed_value_a_missing_row_and_a_changed_type():
    spark_rows = {0: pa.table({"k": [1, 2], "s": [3.0, 4.0]})}
    empty = pa.table({"k": pa.array([], pa.int64()), "s": pa.array([], pa.float64())})
    assert compare(spark_rows, spark_rows) is None
    assert "missing" in str(compare(spark_rows, {0: pa.table({"k": [1], "s": [3.0]})}))
    assert compare(spark_rows, {0: pa.table({"k": [1, 2], "s": [3.0, 4.5]})}) is not None
    assert "columns" in str(compare(spark_rows, {0: pa.table({"k": pa.array([1, 2], pa.int32()), "s": [3.0, 4.0]})}))
    assert "misa ran no batch 0" in str(compare(spark_rows, {1: spark_rows[0]}))
    assert "batches [0, 1], misa [0]" in str(compare({**spark_rows, 1: empty}, spark_rows))


@pytest.mark.slow  # the suite's time
def test_a_checkpoint_path_with_a_space_non_ascii_hash_and_percent_restarts_where_it_left_off(spark, tmp_path):
    """Spark is handed the local copy of its log as a path Hadoop reads back unchanged (not percent-encoded)."""
    query = Query("tumbling", {"k": "bigint"}, ("sum",), window_s=10, delay_s=0, output_mode="append")
    c = case(query, [rows((1, 5, 1)), rows((1, 25, 2))], [rows((1, 7, 4), (2, 40, 1))], [rows((2, 61, 1))])
    assert_same_as_spark(spark, tmp_path / "Shared Drive" / "josé #1 %41 ckpt", c)
    assert not list((tmp_path / "Shared Drive").rglob("*%20*")), "Spark wrote a folder of its own"


def test_a_mismatch_is_shrunk_to_the_rows_that_cause_it(monkeypatch, tmp_path):
    """The shrinker keeps cutting rounds, files and rows while the case still fails (here: while it holds the
    row at 7 s after the row at 25 s, a stand-in for a real run)."""
    from verify.differential import shrink as shrinking
    from verify.differential.runner import Mismatch

    def fails(spark, c: Case, work) -> Mismatch | None:
        times = [row["t"] for r in c.rounds for f in r for row in f]
        return Mismatch(0, "late row lost") if 25_000 in times and 7_000 in times[times.index(25_000) :] else None

    monkeypatch.setattr(shrinking, "run_case", fails)
    query = Query("tumbling", {"k": "bigint"})
    big = case(query, [rows((1, 5, 1), (2, 6, 1)), rows((1, 25, 2))], [rows((3, 1, 1)), rows((1, 7, 4), (1, 8, 1))])
    small = shrinking.shrink(None, big, tmp_path, progress=lambda line: None)
    assert [[[row["t"] for row in f] for f in r] for r in small.rounds] == [[[25_000]], [[7_000]]]
