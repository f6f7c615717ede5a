"""The ``misa`` console command."""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable

from checkpoint import CorruptCheckpointError, DfsUnavailableError, failpoints

from . import bench_ckpt, bench_state, ckpt_cli, demo, report
from .config import ConfigError, defaults_file_text


def _failpoints(_: argparse.Namespace) -> int:
    for name, where in failpoints.FAILPOINTS.items():
        print(f"{name:30} {where}")
    print(f"\nenable with {failpoints.ENV_VAR}='name=action;...'; actions: raise, raise(N), sleep(MS), kill, kill(N), off")
    return 0


def _conf(_: argparse.Namespace) -> int:
    print(defaults_file_text(), end="")
    return 0


Extension = Callable[[argparse._SubParsersAction, argparse._SubParsersAction], None]


def build_parser(*extensions: Extension) -> argparse.ArgumentParser:
    """The command line; ``extensions(commands, bench_commands)`` add sub-commands from packages above
    ``misa`` (jobs)."""
    parser = argparse.ArgumentParser(prog="misa", description="MiSA for PySpark: RocksDB state with asynchronous commit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log retries and progress")
    sub = parser.add_subparsers(dest="command", required=True)
    ckpt_cli.add_parser(sub)
    sub.add_parser("failpoints", help="list the failure-injection points").set_defaults(func=_failpoints)
    sub.add_parser("conf", help="print every spark.misa.* key with its default").set_defaults(func=_conf)
    demo.add_parser(sub)
    report.add_parser(sub)
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_command", required=True)
    bench_ckpt.add_parser(bench)
    bench_state.add_parser(bench)
    for extend in extensions:
        extend(sub, bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run_parsed(build_parser(), argv)


def run_parsed(parser: argparse.ArgumentParser, argv: list[str] | None) -> int:
    """Parse ``argv`` with ``parser`` and run the chosen command, reporting known errors in one line."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except (ConfigError, DfsUnavailableError, CorruptCheckpointError) as exc:
        print(f"misa: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
