"""The job benchmarks' statistics: input records per batch, warm-up, single-batch references, ratios."""

import json

import pytest

from bench.runs import add_ratios, batch_stats, markdown_table, rows_per_batch


def _write_metrics(path, latencies, state_keys=None):
    with path.open("w") as out:
        for batch_id, latency in enumerate(latencies):
            out.write(json.dumps({"batch_id": batch_id, "latency_s": latency, "state_keys": state_keys}) + "\n")


def test_rows_per_batch_groups_part_files_in_order(tmp_path):
    for index, lines in enumerate([3, 1, 4, 1, 5]):
        (tmp_path / f"part-{index:08d}.json").write_text("{}\n" * lines)
    (tmp_path / "_side.json").write_text("{}\n" * 100)  # not a part file
    assert rows_per_batch(tmp_path, 2) == [4, 5, 5]


def test_batch_stats_leave_out_warmup_and_count_input_records(tmp_path):
    metrics = tmp_path / "m.jsonl"
    _write_metrics(metrics, [9.0, 1.0, 2.0, 2.0], state_keys=7)
    stats = batch_stats(metrics, warmup=1, batch_rows=[100, 10, 20, 30])
    assert stats["batches"] == 3 and stats["p50"] == 2.0
    assert stats["rows_per_s"] == pytest.approx(60 / 5.0)
    assert stats["state_keys"] == 7


def test_a_single_batch_reference_counts_all_input(tmp_path):
    metrics = tmp_path / "m.jsonl"
    _write_metrics(metrics, [4.0])
    stats = batch_stats(metrics, warmup=3, batch_rows=[100, 10, 20, 30])
    assert stats["batches"] == 1 and stats["rows_per_s"] == pytest.approx(40.0) and stats["state_keys"] is None


def test_batch_stats_fail_when_warmup_leaves_nothing(tmp_path):
    metrics = tmp_path / "m.jsonl"
    _write_metrics(metrics, [1.0, 1.0])
    with pytest.raises(RuntimeError, match="no batches after the 2 warm-up batches"):
        batch_stats(metrics, warmup=2, batch_rows=[1, 1])


def test_ratios_compare_within_a_group_and_show_in_the_table():
    rows = [
        {"query": q, "mode": m, "batches": 1, "p50": p99, "p99": p99, "rows_per_s": tput, "state_keys": None}
        for q, m, p99, tput in [
            ("a", "sync", 2.0, 100.0),
            ("a", "misa", 1.0, 150.0),
            ("a", "native", 4.0, 50.0),
            ("b", "misa", 3.0, 10.0),
        ]
    ]
    add_ratios(rows, ["query"])
    assert rows[1]["p99_vs_sync"] == 0.5 and rows[1]["p99_vs_native"] == 0.25 and rows[1]["tput_vs_sync"] == 1.5
    assert "p99_vs_sync" not in rows[3] and "p99_vs_native" not in rows[3]
    table = markdown_table(rows, ["query", "mode"]).splitlines()
    assert len(table) == 2 + len(rows)
    assert table[3].startswith("| a | misa | 1 | 1.00 | 1.00 | 150 | 0.50 | 0.25 | 1.50 |")
    assert table[5].startswith("| b | misa | 1 | 3.00 | 3.00 | 10 | - | - | - |")
