"""Issue 61's check: misa's output against Spark's before a benchmark reports a ratio (bench.same_output)."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from bench import live, recovery, same_output, user_queries
from bench.runs import DIFFERS, SAME, add_ratios, markdown_table
from bench.same_output import DIFFER_EXIT, compare_batches, compare_runs, compare_settled, differ_exit
from misa.io.sink import ParquetBatchSink

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _rows(*rows: tuple) -> pa.Table:
    """A join's output: two sides' columns, one name shared (a join's may), a struct and a float."""
    columns = list(zip(*rows)) if rows else [[], [], [], []]
    return pa.table(
        [
            pa.array(columns[0], pa.string()),
            pa.array([{"start": T0, "end": T0} for _ in columns[0]], pa.struct([("start", pa.timestamp("us", "UTC")),
                                                                                  ("end", pa.timestamp("us", "UTC"))])),
            pa.array(columns[2], pa.int64()),
            pa.array(columns[3], pa.float64()),
        ],
        names=["k", "window", "k", "avg"],
    )  # fmt: skip


SPARK = {0: _rows(("a", 0, 1, 0.5), ("b", 0, 2, 1.5), ("b", 0, 2, 1.5)), 1: _rows(("c", 0, 3, 2.5)), 2: _rows()}


def test_equal_batches_in_other_row_orders_are_the_same_output():
    misa = {0: SPARK[0].take([2, 0, 1]), 1: SPARK[1], 2: _rows()}
    check = compare_batches(misa, SPARK)
    assert check.same and (check.misa_rows, check.spark_rows) == (4, 4)
    assert check.line() == "outputs equal (batch by batch): misa 4 rows, Spark 4 rows"


def test_floats_summed_in_another_order_are_the_same_but_a_changed_value_is_not():
    summed = {0: _rows(("a", 0, 1, 0.1 + 0.2))}
    assert compare_batches(summed, {0: _rows(("a", 0, 1, 0.3))}).same
    assert not compare_batches({0: _rows(("a", 0, 1, 0.31))}, {0: _rows(("a", 0, 1, 0.3))}).same


@pytest.mark.parametrize(
    "misa,what",
    [
        ({0: SPARK[0].slice(0, 2), 1: SPARK[1]}, "1 reference rows missing, 0 extra rows"),  # a row missing
        ({0: SPARK[0], 1: pa.concat_tables([SPARK[1], SPARK[1]])}, "0 reference rows missing, 1 extra rows"),
        ({0: SPARK[0], 1: _rows(("c", 0, 4, 2.5))}, "1 reference rows missing, 1 extra rows"),  # a value changed
    ],
    ids=["missing", "extra", "changed"],
)
def test_a_missing_an_extra_or_a_changed_row_is_another_output(misa, what):
    check = compare_batches(misa, SPARK)
    assert not check.same and what in check.difference
    assert check.line().startswith("outputs differ: misa ") and check.line().endswith("— no ratio reported")


def test_a_row_in_another_batch_is_another_output():
    assert not compare_batches({0: pa.concat_tables([SPARK[0], SPARK[1]]), 1: _rows()}, SPARK).same


def test_no_rows_at_all_says_how_many_spark_wrote_and_that_no_ratio_is_reported():
    check = compare_batches({0: _rows(), 1: pa.table({})}, {0: SPARK[0], 1: pa.concat_tables([SPARK[1]] * 16_116)})
    assert check.line() == "outputs differ: misa 0 rows, Spark 16,119 rows — no ratio reported"
    assert check.difference.startswith("2 of 2 batches with rows differ; the first, batch 0: 3 reference rows missing")


def test_two_empty_outputs_check_nothing_and_give_no_ratio():
    """A benchmark whose engines both wrote nothing measured nothing comparable (a join then a window that closed
    no window in the run)."""
    empty = same_output.compare_batches({0: pa.table({"k": pa.array([], pa.int64())})}, {})
    assert (empty.same, empty.empty) == (False, True)
    assert empty.line() == "outputs empty: neither engine wrote a row, so nothing was checked — no ratio reported"
    assert same_output.differ_exit({"q": empty}) == same_output.DIFFER_EXIT


def test_column_types_are_part_of_the_output():
    wider = SPARK[1].set_column(2, "k", pa.array([3], pa.int32()))
    assert "columns" in compare_batches({1: wider}, {1: SPARK[1]}).difference


def test_a_columns_nullability_is_not_part_of_the_output():
    required = pa.schema([pa.field("n", pa.int64(), nullable=False)])
    assert compare_batches({0: pa.table({"n": [2, 1]}, schema=required)}, {0: pa.table({"n": [1, 2]})}).same


def test_a_timestamps_zone_named_utc_or_etc_utc_is_the_same_zone_but_another_zone_is_not():
    def at(zone):
        return pa.table({"window": pa.array([{"end": T0}], pa.struct([("end", pa.timestamp("us", zone))]))})

    assert compare_batches({0: at("UTC")}, {0: at("Etc/UTC")}).same
    assert not compare_batches({0: at("UTC")}, {0: at("Europe/Paris")}).same


def _sink(root, batches):
    sink = ParquetBatchSink(root)
    for batch_id, table in batches.items():
        sink(batch_id, table)
    return root


def test_runs_cut_into_other_batches_compare_their_rows_without_batch_ids(tmp_path):
    spark = _sink(tmp_path / "spark", {0: pa.concat_tables([SPARK[0], SPARK[1]])})  # one batch (a batch job)
    misa = _sink(tmp_path / "misa", SPARK)
    check = compare_runs((misa, tmp_path / "no-ckpt"), (spark, tmp_path / "no-ckpt"))
    assert check.same and check.how == "rows without batch ids"
    lost = _sink(tmp_path / "lost", {0: SPARK[0]})
    assert compare_settled(lost, spark).line() == "outputs differ: misa 3 rows, Spark 4 rows — no ratio reported"


def test_an_update_output_compares_the_last_row_per_key(tmp_path):
    def counts(*rows):
        return pa.table({"k": [r[0] for r in rows], "n": [r[1] for r in rows]})

    spark = _sink(tmp_path / "spark", {0: counts(("a", 1), ("b", 1)), 1: counts(("a", 3))})
    misa = _sink(tmp_path / "misa", {0: counts(("a", 3), ("b", 1))})  # other batches, the same result
    assert compare_settled(misa, spark, keys=["k"]).same
    stale = _sink(tmp_path / "stale", {0: counts(("a", 2), ("b", 1))})
    assert not compare_settled(stale, spark, keys=["k"]).same


def test_an_append_aggregation_compares_the_windows_both_runs_closed(tmp_path):
    def windows(*ends):
        return pa.table({"window_end": list(ends), "n": [1] * len(ends)})

    spark = _sink(tmp_path / "spark", {0: windows(10, 20), 1: windows(30)})  # closed one window more at its stop
    misa = _sink(tmp_path / "misa", {0: windows(10), 1: windows(20)})
    assert compare_settled(misa, spark, windows_closed=True).same
    assert not compare_settled(misa, spark).same
    nothing = _sink(tmp_path / "nothing", {0: windows()})
    assert not compare_settled(nothing, spark, windows_closed=True).same


def test_the_key_columns_of_the_jobs_queries_by_output_mode():
    assert same_output.settled_keys("q18") == ("bidder", "auction")
    assert same_output.settled_keys("cm2") == ("window_start", "window_end", "job_id")
    assert same_output.settled_keys("cm2", "append") is None
    assert same_output.settled_keys("lr2") is None and same_output.settled_keys("q20") is None


def test_differing_outputs_are_printed_and_exit_non_zero(capsys):
    same = compare_batches(SPARK, SPARK)
    assert differ_exit({"join": same, "dedup": None}) == 0
    assert differ_exit({"join": same, "self_join": compare_batches({}, SPARK)}) == DIFFER_EXIT
    out = capsys.readouterr().out
    assert (
        "self_join: outputs differ: misa 0 rows, Spark 4 rows — no ratio reported\n  2 of 2 batches with rows differ"
        in out
    )
    assert "join: outputs equal" not in out


def test_bench_queries_gives_no_ratio_for_a_query_whose_output_differs():
    rows = [
        {"query": q, "engine": e, "repeat": 0, "wall_s": 2.0, "batch_ms": [100.0], "output_rows": n, "same_output": ok}
        for q, e, n, ok in [
            ("self_join", "spark", 16_119, False),
            ("self_join", "misa", 0, False),
            ("join", "spark", 5, True),
            ("join", "misa", 5, True),
        ]
    ]
    lines = user_queries.table(rows).splitlines()
    assert lines[3] == "| self_join | misa | 1 | 0 | 2.0 | 100 | 100 | outputs differ: no ratio | - | - |"
    assert lines[5] == "| join | misa | 1 | 5 | 2.0 | 100 | 100 | 1.00 | 1.00 | 1.00 |"


def test_the_job_benchmarks_give_no_ratio_for_or_against_a_mode_whose_output_differs():
    rows = [
        {"query": "q20", "mode": m, "batches": 1, "p50": 1.0, "p99": p99, "rows_per_s": 10.0, "state_keys": None}
        for m, p99 in [("sync", 2.0), ("misa", 1.0), ("native", 4.0)]
    ]
    rows[0]["output"], rows[1]["output"] = DIFFERS, SAME
    add_ratios(rows, ["query"])
    assert "p99_vs_sync" not in rows[0] and "p99_vs_native" not in rows[0]
    assert "p99_vs_sync" not in rows[1] and rows[1]["p99_vs_native"] == 0.25  # sync differs: no ratio against it
    table = markdown_table(rows, ["query", "mode"]).splitlines()
    assert table[2].endswith("| - | - | - | n/a | DIFFERS from native |")


def test_recovery_gives_no_ratio_on_a_target_where_the_outputs_differ():
    split = dict.fromkeys((*recovery.PHASES, *recovery.RECOVERY_STEPS), 1.0)
    row = {"target": "local", "case": "same", "run": 1, "keys": 10, **split}
    rows = [row | {"mode": "misa", "total_s": 5.0}, row | {"mode": "native", "total_s": 10.0}]
    assert "| 0.50 |" in recovery.markdown(rows)
    table = recovery.markdown(rows, {"local"})
    assert "| 0.50 |" not in table and table.count("| outputs differ |") == 2  # the median's and the run's


def test_live_reports_no_capacity_for_a_mode_whose_output_differs(tmp_path):
    def row(mode, rate, output_dir, **extra):
        return {"query": "q20", "mode": mode, "variant": "", "rate": rate, "target": "local", "sustained": True,
                "unfinished_files": 0, "output_dir": str(output_dir), "output_mode": None, **extra}  # fmt: skip

    spark = _sink(tmp_path / "spark", SPARK)
    lost = _sink(tmp_path / "lost", {0: SPARK[0]})
    rows = [row("native", 100.0, spark), row("misa", 100.0, lost), row("sync", 100.0, spark),
            row("sync", 200.0, spark), row("nocommit", 100.0, spark, unfinished_files=2)]  # fmt: skip
    checks = live.check_outputs(rows)
    unfinished = "not checked: nocommit stopped before the batches of 2 files ended"
    assert [r.get("output") for r in rows] == [
        None, DIFFERS, SAME, "not checked: no native run at this rate", unfinished
    ]  # fmt: skip
    assert list(checks) == ["q20 local misa 100/s", "q20 local sync 100/s"]
    assert "| q20 | local | misa | outputs differ: no rate reported |" in live.markdown(
        [r | _live_figures() for r in rows], True
    )


def test_live_checks_a_run_on_a_slow_target_against_spark_on_another_where_spark_ended_every_batch(tmp_path):
    def row(mode, target, output_dir, unfinished=0):
        return {"query": "q20", "mode": mode, "variant": "", "rate": 100.0, "target": target, "sustained": True,
                "unfinished_files": unfinished, "output_dir": str(output_dir), "output_mode": None}  # fmt: skip

    spark = _sink(tmp_path / "spark", SPARK)
    lost = _sink(tmp_path / "lost", {0: SPARK[0]})
    rows = [row("native", "dfs", lost, unfinished=5), row("misa", "dfs", spark), row("sync", "dfs", lost),
            row("native", "local", spark)]  # fmt: skip
    live.check_outputs(rows)
    assert [r.get("output") for r in rows] == [None, SAME, DIFFERS, None]


def _live_figures() -> dict:
    return {"batches": 1, "batch_p50": 1.0, "batch_p99": 1.0, "e2e_p50": 1.0, "e2e_p99": 1.0, "backlog_files": 0,
            "state_keys": None, "phases": {}}  # fmt: skip


@pytest.mark.slow
def test_the_self_join_of_bench_queries_gives_the_same_rows_on_misa_and_spark(spark, tmp_path):
    user_queries.generate(tmp_path / "input", files=2, records=400, keys=50, file_seconds=5)
    args = argparse.Namespace()
    outputs = {}
    for engine, run in (("spark", user_queries.run_spark), ("misa", user_queries.run_misa)):
        _, _, outputs[engine] = run(spark, args, "self_join", tmp_path / engine, tmp_path / "input")
    check = compare_batches(outputs["misa"], outputs["spark"])
    assert check.same and check.spark_rows > 0, check.report()
