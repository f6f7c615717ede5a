"""The console commands that `make run` and the closing notes rely on."""

import json

from misa.cli import main as misa


def test_bench_ckpt_reports_every_size_change_and_target(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    args = [
        "bench",
        "ckpt",
        "--keys",
        "2000,4000",
        "--changes",
        "0.01,0.1",
        "--versions",
        "1",
        "--dfs",
        f"a=file://{tmp_path / 'a'}",
        "--dfs",
        f"b=file://{tmp_path / 'b'}",
        "--out",
        str(out),
    ]
    assert misa(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(r["keys"], r["change"], r["target"]) for r in rows} == {
        (k, c, t) for k in (2000, 4000) for c in (0.0, 0.01, 0.1) for t in ("a", "b")
    }
    full = [r for r in rows if r["change"] == 0.0]
    assert all(r["bytes_uploaded"] == r["state_bytes"] for r in full)
    small = [r for r in rows if r["change"] == 0.01]
    assert all(0 < r["bytes_uploaded"] < r["state_bytes"] for r in small)


def test_failpoints_and_conf_commands(capsys):
    assert misa(["failpoints"]) == 0
    assert "ckpt.after_dfs_marker" in capsys.readouterr().out
    assert misa(["conf"]) == 0
    assert "spark.misa.state.shards 4" in capsys.readouterr().out


def test_restore_of_a_missing_version_exits_nonzero(tmp_path, capsys):
    assert misa(["ckpt", "restore", f"file://{tmp_path}/none", "3", str(tmp_path / "x")]) == 1
    assert "not committed" in capsys.readouterr().out
