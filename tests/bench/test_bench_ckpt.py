"""``misa bench ckpt``: the checkpoint upload sizes per state size, change and DFS target."""

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
