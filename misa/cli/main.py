"""The ``misa`` console command.

The runtime's own commands are here; packages above ``misa`` (the jobs: ``gen``, ``soak``, ``bench
cm``, ``bench jobs``) add theirs through the ``misa.commands`` entry point group, so ``misa`` never
imports them.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import entry_points
from typing import Callable

from checkpoint import CorruptCheckpointError, DfsUnavailableError, failpoints
from misa.bench import ckpt as bench_ckpt
from misa.bench import state as bench_state
from misa.cli import ckpt as ckpt_cli
from misa.config import ConfigError, defaults_file_text
from misa.obs import report


def _failpoints(_: argparse.Namespace) -> int:
    for name, where in failpoints.FAILPOINTS.items():
        print(f"{name:30} {where}")
    print(
        f"\nenable with {failpoints.ENV_VAR}='name=action;...'; actions: raise, raise(N), sleep(MS), kill, kill(N), off"
    )
    return 0


def _conf(_: argparse.Namespace) -> int:
    print(defaults_file_text(), end="")
    return 0


Extension = Callable[[argparse._SubParsersAction, argparse._SubParsersAction], None]


def build_parser() -> argparse.ArgumentParser:
    """The command line, with the sub-commands every installed ``misa.commands`` entry point adds."""
    parser = argparse.ArgumentParser(
        prog="misa", description="MiSA for PySpark: RocksDB state with asynchronous commit"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log retries and progress")
    sub = parser.add_subparsers(dest="command", required=True)
    ckpt_cli.add_parser(sub)
    sub.add_parser("failpoints", help="list the failure-injection points").set_defaults(func=_failpoints)
    sub.add_parser("conf", help="print every spark.misa.* key with its default").set_defaults(func=_conf)
    report.add_parser(sub)
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_command", required=True)
    bench_ckpt.add_parser(bench)
    bench_state.add_parser(bench)
    for entry in entry_points(group="misa.commands"):
        extend: Extension = entry.load()
        extend(sub, bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command, reporting known errors in one line."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except (ConfigError, DfsUnavailableError, CorruptCheckpointError) as exc:
        print(f"misa: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
