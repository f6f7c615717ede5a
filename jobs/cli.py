"""The ``misa`` console command: the runtime's commands plus the data generators (``misa gen``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from misa.cli import build_parser, run_parsed

from .gen_cm import TRACE_START_US, generate_cm


def _gen_cm(args: argparse.Namespace) -> int:
    stats = generate_cm(args.out, args.rate, args.seconds, args.seed, args.files_per_second, args.jobs,
                        args.start_time_us)
    span = (stats["last_time_us"] - stats["first_time_us"]) / 1e6 if stats["records"] else 0.0
    print(f"wrote {stats['records']} task events in {stats['files']} files to {args.out} "
          f"({span:.1f} s of event time)")
    return 0


def add_gen_parser(subparsers: argparse._SubParsersAction) -> None:
    gen = subparsers.add_parser("gen", help="generate input data for the jobs")
    sub = gen.add_subparsers(dest="gen_command", required=True)
    cm = sub.add_parser("cm", help="Cluster Monitoring task events (JSON lines)")
    cm.add_argument("--out", type=Path, required=True)
    cm.add_argument("--rate", type=float, required=True, help="mean records per second of event time")
    cm.add_argument("--seconds", type=int, required=True, help="seconds of event time")
    cm.add_argument("--seed", type=int, default=0)
    cm.add_argument("--files-per-second", type=float, default=1.0, help="files per second of event time")
    cm.add_argument("--jobs", type=int, default=10_000, help="distinct job ids")
    cm.add_argument("--start-time-us", type=int, default=TRACE_START_US)
    cm.set_defaults(func=_gen_cm)


def main(argv: list[str] | None = None) -> int:
    return run_parsed(build_parser(add_gen_parser), argv)


if __name__ == "__main__":
    sys.exit(main())
