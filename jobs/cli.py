"""The ``misa`` console command: the runtime's commands plus the data generators (``misa gen``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from misa.cli import build_parser, run_parsed

from . import bench_cm
from .gen_cm import generate_cm


def _gen_cm(args: argparse.Namespace) -> int:
    try:
        stats = generate_cm(args.out, args.rate, args.seconds, args.seed, args.files_per_second,
                            args.start_time_us, jobs=args.jobs)
    except ValueError as exc:
        print(f"misa: error: {exc}", file=sys.stderr)
        return 2
    if stats["records"]:
        first, last = stats["first_time_us"], stats["last_time_us"]
        span = f"event time {first} .. {last} us ({(last - first) / 1e6:.1f} s)"
    else:
        span = "no events"
    print(f"gen cm: {stats['records']} records in {stats['files']} files in {args.out}; {span}")
    return 0


def add_gen_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``gen`` (input data generators) to the ``misa`` command line."""
    gen = subparsers.add_parser("gen", help="generate input data for the jobs")
    sub = gen.add_subparsers(dest="gen_command", required=True)
    cm = sub.add_parser("cm", help="Cluster Monitoring task events (JSON lines)")
    cm.add_argument("--out", type=Path, required=True)
    cm.add_argument("--rate", type=float, required=True, help="mean records per second of event time")
    cm.add_argument("--seconds", type=int, required=True, help="seconds of event time")
    cm.add_argument("--seed", type=int, default=0)
    cm.add_argument("--files-per-second", type=float, default=1.0, help="files per second of event time")
    cm.add_argument("--jobs", type=int, default=10_000, help="distinct job ids")
    cm.add_argument("--start-time-us", type=int, default=0, help="event time of the start, in microseconds")
    cm.set_defaults(func=_gen_cm)


def add_job_commands(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """``misa gen ...`` and ``misa bench cm``."""
    add_gen_parser(commands)
    bench_cm.add_parser(bench)


def main(argv: list[str] | None = None) -> int:
    """Run the ``misa`` command (with ``gen``) and return its exit code."""
    return run_parsed(build_parser(add_job_commands), argv)


if __name__ == "__main__":
    sys.exit(main())
