"""The console commands that `make run` and the closing notes rely on."""

import argparse
from typing import Iterator

import pytest

from misa.cli import build_parser
from misa.cli import main as misa


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
    # the entry points' (bench, jobs, services, verify): an install older than setup.cfg's entry points lacks some
    entry_points = {"misa bench ckpt", "misa bench cm", "misa gen cm", "misa kafka up", "misa soak", "misa fuzz"}
    assert {"misa ckpt list", "misa ckpt gc", "misa report", *entry_points} <= set(commands)
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
