"""``misa report``: summary statistics, tolerance to incomplete records, plots and the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from misa.cli import main as misa
from misa.obs.records import CACHE_COUNTERS, PREFETCH_COUNTERS
from misa.obs.report import (
    compare,
    format_comparison,
    format_summary,
    load_metrics,
    plot,
    split_series,
    summarize,
    timeline,
)
from misa.obs.runs import split_runs, steady
from prefetch.cache import CacheStats
from prefetch.manager import PrefetchStats

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LATENCIES = [0.3, 0.1, 1.0, 0.5, 0.2, 0.9, 0.4, 0.7, 0.6, 0.8]  # shuffled 0.1 .. 1.0


def _records(mode: str = "misa", scale: float = 1.0) -> list[dict]:
    """Ten batches, one second apart, 100 input rows each; batch i has latency LATENCIES[i] * scale."""
    return [
        {
            "batch_id": i,
            "mode": mode,
            "input_rows": 100,
            "late_rows": i % 2,
            "started": 1000.0 + i,
            "latency_s": lat * scale,
            "phases": {"compute_s": lat * scale / 2, "sink_s": 0.01},
            "commit": {"apply_s": 0.05, "upload_s": 0.2 + i / 100, "bytes_uploaded": 1000, "bytes_reused": 10},
            "cache": {"hits": 3, "misses": 1},
            "state_keys": 50 + i,
        }
        for i, lat in enumerate(LATENCIES)
    ]


def _write(path: Path, records: list, extra_lines: tuple[str, ...] = ()) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(line + "\n" for line in extra_lines))
    return path


def _assert_png(path: Path) -> None:
    import matplotlib.image

    data = path.read_bytes()
    assert len(data) > 1000 and data[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(path)
    assert image.ndim >= 2 and image.shape[0] > 100 and image.shape[1] > 100


def test_percentiles_throughput_and_totals_match_hand_computed_values():
    s = summarize(_records())
    assert s["batches"] == 10 and s["modes"] == {"misa": 10} and s["percentile_method"] == "linear"
    # sorted 0.1 .. 1.0, linear interpolation at rank q/100 * 9: p50 between 0.5 and 0.6, p95 at 8.55, p99 at 8.91
    assert s["latency_s"] == pytest.approx(
        {"count": 10, "p50": 0.55, "p95": 0.955, "p99": 0.991, "max": 1.0, "mean": 0.55}
    )
    t = s["throughput"]
    assert t["input_rows"] == 1000
    assert t["busy_s"] == pytest.approx(5.5) and t["rows_per_s"] == pytest.approx(1000 / 5.5)
    # first start 1000, last batch starts at 1009 and takes 0.8 s
    assert t["wall_s"] == pytest.approx(9.8) and t["rows_per_wall_s"] == pytest.approx(1000 / 9.8)
    assert list(s["phases_s"]) == ["compute_s", "sink_s"]
    assert s["phases_s"]["compute_s"] == pytest.approx({"count": 10, "mean": 0.275, "p99": 0.4955})
    assert s["commit_s"]["upload_s"] == pytest.approx({"count": 10, "mean": 0.245})
    assert s["commit_s"]["apply_s"]["mean"] == pytest.approx(0.05)
    assert "bytes_uploaded" not in s["commit_s"]
    assert (s["bytes_uploaded"], s["bytes_reused"], s["late_rows"]) == (10_000, 100, 5)
    assert s["cache"] == {"hits": 30, "misses": 10}
    assert s["state_keys"] == 59


def test_missing_keys_and_null_commit_are_tolerated(tmp_path):
    records = [
        {},
        {"batch_id": 1, "latency_s": None, "commit": None, "phases": None, "cache": None, "mode": None},
        {
            "batch_id": 2,
            "latency_s": 2.0,
            "input_rows": 10,
            "commit": {"upload_s": None, "flush_s": 0.3},
            "phases": {"compute_s": "fast"},
            "state_keys": 7,
        },
        {"batch_id": 3, "latency_s": 4.0, "started": 50.0, "late_rows": True, "commit": "oops", "cache": [1]},
    ]
    s = summarize(records)
    assert s["batches"] == 4 and s["modes"] == {}
    assert s["latency_s"]["count"] == 2 and s["latency_s"]["p50"] == pytest.approx(3.0)
    assert s["throughput"]["rows_per_s"] == pytest.approx(10 / 2.0)  # only batch 2 has both rows and latency
    assert s["throughput"]["wall_s"] == pytest.approx(4.0) and s["throughput"]["rows_per_wall_s"] is None
    assert s["phases_s"] == {} and list(s["commit_s"]) == ["flush_s"]
    assert s["bytes_uploaded"] is None and s["late_rows"] is None and s["cache"] == {}
    assert s["state_keys"] == 7
    text = format_summary(s)
    assert "n/a" in text and "flush_s" in text

    empty = summarize([{}])
    assert empty["latency_s"] is None and "batch latency: n/a" in format_summary(empty)
    assert plot([{}], tmp_path / "none") == []


def test_malformed_lines_are_counted_reported_and_skipped(tmp_path, capsys):
    path = _write(
        tmp_path / "m.jsonl",
        _records()[:3],
        ("{not json", "", "[1, 2]", "42", '{"batch_id": 9, "latency_s": 0.5}', '{"batch_id": 10, "lat'),
    )
    records, malformed = load_metrics(path)
    assert malformed == 4
    assert [r["batch_id"] for r in records] == [0, 1, 2, 9]
    err = capsys.readouterr().err
    assert all(f"{path}:{n}:" in err for n in (4, 6, 7, 9)) and "4 malformed" in err
    assert f"{path}:5:" not in err  # a blank line is not malformed


def test_plots_are_valid_pngs(tmp_path):
    written = plot(_records(), tmp_path / "plots")
    assert [p.name for p in written] == ["latency_timeline.png", "latency_cdf.png"]
    for path in written:
        _assert_png(path)


def test_plots_tolerate_repeated_and_missing_batch_ids_and_partial_phases(tmp_path):
    records = _records()[:4] + _records()[2:6]  # a restarted job repeats batches 2 and 3
    records[1]["phases"] = None
    records[2]["phases"] = {"hint_wait_s": 0.01}
    del records[5]["batch_id"]
    assert [p.name for p in plot(records, tmp_path)] == ["latency_timeline.png", "latency_cdf.png"]
    _assert_png(tmp_path / "latency_timeline.png")


def test_series_per_mode_and_per_file():
    a, b = _records("misa"), _records("baseline", scale=2.0)
    assert list(split_series([("run", a + b)])) == ["misa", "baseline"]
    assert list(split_series([("a", a), ("b", b)])) == ["misa", "baseline"]
    assert list(split_series([("a", a), ("b", _records("misa"))])) == ["a:misa", "b:misa"]
    no_mode = [{k: v for k, v in r.items() if k != "mode"} for r in a]
    assert list(split_series([("x", no_mode), ("y", a)])) == ["x", "misa"]
    assert list(split_series([("x", no_mode), ("x", no_mode)])) == ["x", "x (2)"]


@pytest.fixture
def saved_figures(monkeypatch) -> list:
    """Every matplotlib figure saved during the test, in order (they are still written)."""
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    original = Figure.savefig

    def keep(fig: Figure, *args, **kwargs):
        saved.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return saved


def test_plot_draws_one_series_per_mode(tmp_path, saved_figures):
    plot({"misa": _records("misa"), "baseline": _records("baseline", scale=2.0)}, tmp_path)
    timeline, cdf = saved_figures
    assert [t.get_text() for t in timeline.axes[0].get_legend().get_texts()] == ["misa", "baseline"]
    # latency, then the bytes uploaded (no series has the runtime's state read, merge or state size)
    assert [ax.get_title() for ax in timeline.axes] == ["batch latency", "bytes uploaded per commit"]
    labels = [t.get_text() for t in cdf.axes[0].get_legend().get_texts()]
    assert labels == ["misa: p50 0.550 s, p99 0.991 s (n=10)", "baseline: p50 1.100 s, p99 1.982 s (n=10)"]


def test_cli_prints_each_file_and_writes_plots(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", _records("misa"))
    b = _write(tmp_path / "b.jsonl", _records("baseline", scale=2.0))
    assert misa(["report", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"== {a} ==" in out and f"== {b} ==" in out
    assert "p50" in out and "p95" in out and "p99" in out and "'linear'" in out
    assert "0.550" in out and "0.955" in out and "0.991" in out and "1.982" in out
    for name in ("latency_timeline.png", "latency_cdf.png"):
        assert f"wrote {tmp_path / 'out' / name}" in out
        _assert_png(tmp_path / "out" / name)


def test_cli_splits_a_file_with_several_modes_and_plots_nothing_without_out(tmp_path, capsys):
    mixed = _write(tmp_path / "mixed.jsonl", _records("misa") + _records("baseline", scale=2.0))
    assert misa(["report", str(mixed)]) == 0
    out = capsys.readouterr().out
    assert f"== {mixed} [misa] ==" in out and f"== {mixed} [baseline] ==" in out and "wrote" not in out
    assert list(tmp_path.iterdir()) == [mixed]


def test_cli_returns_1_for_a_file_without_valid_records(tmp_path, capsys):
    good = _write(tmp_path / "good.jsonl", _records())
    bad = _write(tmp_path / "bad.jsonl", [], ("garbage",))
    assert misa(["report", str(good), str(bad), str(tmp_path / "missing.jsonl")]) == 1
    captured = capsys.readouterr()
    assert f"== {good} ==" in captured.out
    assert f"{bad}: no valid record" in captured.err and "cannot read" in captured.err


def test_importing_the_report_module_does_not_import_matplotlib():
    code = "import sys, misa.cli.main, misa.obs.report; print('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_cache_and_prefetch_manager_counters_keep_their_own_names_and_the_slack_is_weighted_by_hits():
    records = _records()
    for i, record in enumerate(records):
        record["cache"] = {"hits": 3, "misses": 1, "prefetched_entries": 4, "prefetched_entries_read": 2}
        record["prefetch"] = {
            "hints": 10,
            "prefetched": 4,
            "prefetch_hits": 3 if i < 5 else 1,
            "wasted_prefetches": 1,
            "late_hints": 2,
            "slack_s_mean": 0.2 if i < 5 else 1.0,
            "slack_s_min": 0.05 + i / 100,
        }
    s = summarize(records)
    assert s["cache"]["prefetched_entries_read"] == 20 and "prefetch_hits" not in s["cache"]
    assert s["prefetch"]["prefetch_hits"] == 20 and s["prefetch"]["wasted_prefetches"] == 10
    assert s["prefetch"]["late_hints"] == 20
    assert s["prefetch"]["slack_s_mean"] == pytest.approx((15 * 0.2 + 5 * 1.0) / 20)
    assert s["prefetch"]["slack_s_min"] == pytest.approx(0.05)
    text = format_summary(s)
    assert "prefetched_entries_read" in text and "wasted_prefetches" in text and "slack_s_mean" in text
    assert summarize(_records())["prefetch"] == {}


def test_the_report_sums_every_counter_the_cache_and_the_prefetch_manager_declare():
    """The counters' lists come from CacheStats and PrefetchStats: a counter added there is reported."""
    cache, prefetch = CacheStats(), PrefetchStats()
    cache.hits, prefetch.failed_prefetches = 2, 1
    records = _records()[:2]
    for record in records:
        record["cache"], record["prefetch"] = cache.as_dict(), prefetch.as_dict()
    s = summarize(records)
    assert list(s["cache"]) == list(CACHE_COUNTERS) == list(cache.as_dict()) and s["cache"]["hits"] == 4
    assert list(s["prefetch"]) == [*PREFETCH_COUNTERS, "slack_s_mean", "slack_s_min"]
    assert s["prefetch"]["failed_prefetches"] == 2 and "failed_prefetches" in format_summary(s)


def _run(mode: str, batches: range, latencies: list[float], start: float, run: float | None) -> list[dict]:
    """Batches of one run, 10 s apart from ``start``, 1,000 input rows each; the runtime's fields in runtime
    modes, Spark's state store (memory and SST files, rows not counted) in native mode."""
    records = []
    for i, (batch, lat) in enumerate(zip(batches, latencies)):
        record = {"batch_id": batch, "mode": mode, "started": start + 10 * i, "latency_s": lat, "input_rows": 1000}
        if run is not None:
            record["run_started"] = run
        if mode == "native":
            record |= {"spark_state_memory_bytes": 3 << 20, "spark_state_sst_bytes": 1 << 20}
        else:
            record |= {
                "phases": {"compute_s": lat - 0.05, "state_read_s": 0.01, "state_apply_s": 0.04},
                "commit_status": {"pending": [batch], "last_local": batch - 1, "last_durable": batch - 1},
                "commit": {"version": batch - 1, "bytes_uploaded": 2048 * (batch + 1)},
                "state_bytes": (batch + 1) << 20,
                "state_keys": 75 * (batch + 1),
            }
        records.append(record)
    return records


def _two_modes_with_a_restart() -> list[dict]:
    """misa: a run of batches 0-5, killed, then a run that replays 5 and goes on to 8 (the same file);
    then native: one run of batches 0-6. Warm-up batches take 9 s, the others 0.5 to 1 s (misa), 2 to 4 s."""
    first = _run("misa", range(0, 6), [9.0, 9.0, 9.0, 0.5, 0.6, 0.7], 1000.0, run=990.0)
    second = _run("misa", range(5, 9), [9.0, 9.0, 9.0, 1.0], 1100.0, run=1095.0)
    native = _run("native", range(0, 7), [9.0, 9.0, 9.0, 2.0, 3.0, 4.0, 2.5], 2000.0, run=1995.0)
    return first + second + native


def test_runs_begin_where_run_started_changes_or_the_batch_id_does_not_increase():
    records = _two_modes_with_a_restart()
    misa_records = [r for r in records if r["mode"] == "misa"]
    assert [[r["batch_id"] for r in run] for run in split_runs(misa_records)] == [[0, 1, 2, 3, 4, 5], [5, 6, 7, 8]]
    # a clean restart continues the batch ids: only run_started tells it
    resumed = _run("misa", range(0, 3), [1.0] * 3, 0.0, run=1.0) + _run("misa", range(3, 5), [1.0] * 2, 50.0, run=2.0)
    assert [len(run) for run in split_runs(resumed)] == [3, 2]
    # files written before run_started: a batch id that goes back or repeats
    old = [{k: v for k, v in r.items() if k != "run_started"} for r in misa_records]
    assert [len(run) for run in split_runs(old)] == [6, 4]
    assert [r["batch_id"] for r in steady(misa_records, 3)] == [3, 4, 5, 8]
    assert steady(misa_records, 0) == misa_records and split_runs([]) == []


def test_the_side_by_side_table_leaves_out_each_runs_warm_up_and_compares_with_native():
    rows = compare(split_series([("metrics", _two_modes_with_a_restart())]), warmup=3)
    misa_row, native_row = rows
    assert (misa_row["name"], misa_row["runs"], misa_row["batches"], misa_row["measured"]) == ("misa", 2, 10, 4)
    # measured misa latencies 0.5, 0.6, 0.7, 1.0; native 2.0, 3.0, 4.0, 2.5
    assert misa_row["p50"] == pytest.approx(0.65) and misa_row["p99"] == pytest.approx(0.991)
    assert misa_row["rows_per_s"] == pytest.approx(4000 / 2.8)
    assert (misa_row["state_bytes"], misa_row["state_keys"], misa_row["state_rows"]) == (9 << 20, 675, None)
    assert native_row["p50"] == pytest.approx(2.75) and native_row["rows_per_s"] == pytest.approx(4000 / 11.5)
    assert (native_row["state_bytes"], native_row["state_keys"]) == (4 << 20, None)  # memory + SST files

    text = format_comparison(rows, warmup=3)
    assert "the first 3 batches of each run" in text
    assert "misa against native: p50 0.24 and p99 0.25 of its latency, 4.11 times its rows/s" in text
    misa_line = next(line for line in text.splitlines() if line.startswith("misa "))
    assert misa_line.split() == ["misa", "2", "4", "of", "10", "0.650", "0.991", "1,429", "9.0", "MiB", "~675"]
    assert "n/a" in next(line for line in text.splitlines() if line.startswith("native "))


def test_the_timeline_overlays_both_modes_from_their_start_and_marks_the_restart():
    data, xlabel = timeline(split_series([("metrics", _two_modes_with_a_restart())]))
    misa_line, native_line = data["misa"], data["native"]
    assert xlabel == "seconds since the series' first batch started"
    assert misa_line["x"] == [0, 10, 20, 30, 40, 50, 100, 110, 120, 130] and native_line["x"][:2] == [0, 10]
    assert misa_line["restarts"] == [100] and native_line["restarts"] == []
    assert misa_line["merge_s"][0] == 0.04 and misa_line["state_read_s"][0] == 0.01
    assert misa_line["commit_lag"] == [1] * 10 and misa_line["bytes_uploaded"][:2] == [2048, 4096]
    assert misa_line["state_bytes"][-1] == 9 << 20 and native_line["state_bytes"] == [4 << 20] * 7
    assert native_line["merge_s"] == [None] * 7 and native_line["commit_lag"] == [None] * 7


def test_the_figure_draws_latency_runtime_phases_uploads_and_state_size_with_the_restart(
    tmp_path, capsys, saved_figures
):
    path = _write(tmp_path / "metrics.jsonl", _two_modes_with_a_restart())
    assert misa(["report", str(path), "--out", str(tmp_path / "out"), "--warmup", "3"]) == 0
    out = capsys.readouterr().out
    assert "misa against native:" in out and out.index("side by side") > out.index("[native] ==")
    for name in ("latency_timeline.png", "latency_cdf.png"):
        _assert_png(tmp_path / "out" / name)
    timeline_fig, cdf = saved_figures
    latency, phases, uploads, state = timeline_fig.axes[:4]
    assert latency.get_title() == (
        "batch latency; warm-up (3 batches a run) above the axis: misa to 9.0 s, native to 9.0 s"
    )
    assert latency.get_ylim()[1] == pytest.approx(4.0 * 1.15)  # the measured batches set the scale
    legend = [t.get_text() for t in latency.get_legend().get_texts()]
    assert legend == ["misa", "misa: restart", "native"]
    assert [line.get_xdata()[0] for line in latency.get_lines() if line.get_linestyle() == "-."] == [100]
    assert phases.get_title().startswith("the runtime's own phases")
    assert [t.get_text() for t in phases.get_legend().get_texts()] == [
        "misa: state read",
        "misa: merge",
        "misa: commit lag",
    ]
    assert uploads.get_title() == "bytes uploaded per commit" and state.get_title().startswith("state size")
    assert [t.get_text() for t in state.get_legend().get_texts()] == ["misa", "native"]
    labels = [t.get_text() for t in cdf.axes[0].get_legend().get_texts()]
    assert labels == ["misa: p50 0.650 s, p99 0.991 s (n=4)", "native: p50 2.750 s, p99 3.970 s (n=4)"]


def test_warmup_must_be_a_number_of_batches(tmp_path, capsys):
    path = _write(tmp_path / "m.jsonl", _records())
    with pytest.raises(SystemExit) as exit_info:
        misa(["report", str(path), "--warmup", "-1"])
    assert exit_info.value.code == 2 and "expected a number of batches (0 or more), got '-1'" in capsys.readouterr().err
