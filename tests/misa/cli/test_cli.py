"""The console commands that `make run` and the closing notes rely on."""

import argparse
import json
from typing import Iterator

import pytest

from misa.cli import build_parser
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


def sub_commands(parser: argparse.ArgumentParser, name: str = "misa") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command below ``parser`` (``misa ckpt gc``, ``misa bench cm``, ...), with its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield f"{name} {sub_name}", sub
                yield from sub_commands(sub, f"{name} {sub_name}")


def test_every_commands_help_describes_its_arguments_and_shows_their_defaults():
    commands = dict(sub_commands(build_parser()))
    assert {"misa ckpt list", "misa ckpt gc", "misa report", "misa bench cm", "misa gen cm"} <= set(commands)
    for name, parser in commands.items():
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{name}: {action.dest} has no help"
            if action.default is not None and action.default is not False:
                assert "default" in action.help, f"{name}: {action.dest}'s help does not show its default"
            assert (action.metavar or action.dest) in text or action.option_strings[0] in text


def test_the_help_shows_the_default_values(capsys):
    with pytest.raises(SystemExit):
        misa(["ckpt", "gc", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "URL the state's DFS copy" in text and "(default: spark.misa.state.retainVersions, 10)" in text


def test_a_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        misa(["ckpt", "verify", "/x", "notanumber"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        "misa ckpt verify: error: argument VERSION: invalid int value: 'notanumber' (see misa ckpt verify --help)"
    ]
