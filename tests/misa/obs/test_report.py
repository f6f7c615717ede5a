"""``misa report``: summary statistics, tolerance to incomplete records, plots and the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from misa.cli import main as misa
from misa.obs.report import format_summary, load_metrics, plot, split_series, summarize

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


def test_plot_draws_one_series_per_mode(tmp_path):
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    original = Figure.savefig

    def keep(fig: Figure, *args, **kwargs):
        saved.append(fig)
        return original(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Figure, "savefig", keep)
        plot({"misa": _records("misa"), "baseline": _records("baseline", scale=2.0)}, tmp_path)
    timeline, cdf = saved
    assert [t.get_text() for t in timeline.axes[0].get_legend().get_texts()] == ["misa", "baseline"]
    assert len(timeline.axes) == 3  # latency, then the stacked phases of each series
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
