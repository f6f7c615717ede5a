"""The jobs' sub-command of ``misa``: the data generators (``misa gen``), registered through the ``misa.commands``
entry point group."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from jobs.gen.cm import generate_cm
from jobs.gen.lr import generate_lr
from jobs.gen.nexmark import generate_nexmark
from jobs.gen.parts import UNITS, LateArrivals
from jobs.gen.ysb import generate_ysb
from misa.config_forms import parse_seconds

Option = tuple[str, type, Any, str]  # flag, type, default, help
BAD_FRACTION: Option = (
    "--bad-fraction",
    float,
    0.0,
    "share of records replaced by malformed ones (bad JSON, missing key, wrong type), "
    "also listed in OUT/_bad_records.txt",
)


@dataclass(frozen=True)
class GenCommand:
    """One ``misa gen`` sub-command: the generator, its event-time unit and its own options."""

    generate: Callable[..., dict]
    help: str
    unit: str  # of the stats' first_time_<unit> and last_time_<unit>
    options: tuple[Option, ...]

    def keywords(self, args: argparse.Namespace) -> dict[str, Any]:
        """The generator's own keyword arguments, from its options."""
        return {key: getattr(args, key) for key in (flag[2:].replace("-", "_") for flag, *_ in self.options)}


GENERATORS = {
    "cm": GenCommand(
        generate_cm,
        "Cluster Monitoring task events (JSON lines)",
        "us",
        (
            ("--jobs", int, 10_000, "distinct job ids"),
            ("--start-time-us", int, 0, "event time of the start, in microseconds"),
        ),
    ),
    "lr": GenCommand(
        generate_lr,
        "Linear Road position reports (JSON lines)",
        "s",
        (
            ("--xways", int, 1, "expressways"),
            (
                "--vehicles",
                int,
                0,
                "distinct vehicle ids, at least 30 x rate; a trip reuses the id "
                "longest off the road (default 0: a new id per trip)",
            ),
            BAD_FRACTION,
        ),
    ),
    "nexmark": GenCommand(
        generate_nexmark,
        "NEXMark person, auction and bid events (JSON lines)",
        "ms",
        (("--side-rows", int, 10_000, "rows of the Q13 side table OUT/_side/side_input.jsonl"), BAD_FRACTION),
    ),
    "ysb": GenCommand(
        generate_ysb,
        "Yahoo Streaming Benchmark ad events (JSON lines)",
        "ms",
        (("--campaigns", int, 100, "campaigns"), ("--ads-per-campaign", int, 10, "ads per campaign"), BAD_FRACTION),
    ),
}


def _generate(args: argparse.Namespace) -> int:
    generator = GENERATORS[args.gen_command]
    try:
        late = LateArrivals(args.late_fraction, parse_seconds(args.lateness), args.seed) if args.late_fraction else None
        stats = generator.generate(
            args.out, args.rate, args.seconds, args.seed, args.files_per_second, late=late, **generator.keywords(args)
        )
    except ValueError as exc:
        print(f"misa: error: {exc}", file=sys.stderr)
        return 2
    print(summary(args.gen_command, stats, args.out, generator.unit))
    return 0


def summary(name: str, stats: dict, out: Path, unit: str) -> str:
    """One line: records (and bad ones, for generators that inject them), files and the event-time span."""
    first, last = stats[f"first_time_{unit}"], stats[f"last_time_{unit}"]
    span = (
        "no events" if first is None else f"event time {first} .. {last} {unit} ({(last - first) / UNITS[unit]:.1f} s)"
    )
    bad = f" ({stats['late']} late)" if stats.get("late") else ""
    if "bad" in stats:
        kinds = ", ".join(f"{kind} {count}" for kind, count in stats["bad_by_kind"].items())
        bad += f" and {stats['bad']} bad" + (f" ({kinds})" if stats["bad"] else "")
    return f"gen {name}: {stats['records']} records{bad} in {stats['files']} files in {out}; {span}"


def add_gen_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``gen`` (input data generators) to the ``misa`` command line."""
    gen = subparsers.add_parser("gen", help="generate input data for the jobs")
    sub = gen.add_subparsers(dest="gen_command", required=True)
    for name, generator in GENERATORS.items():
        p = sub.add_parser(name, help=generator.help)
        p.add_argument("--out", type=Path, required=True, help="folder to write the input files into")
        p.add_argument("--rate", type=float, required=True, help="mean records per second of event time")
        p.add_argument("--seconds", type=int, required=True, help="seconds of event time")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--files-per-second", type=float, default=1.0, help="files per second of event time")
        p.add_argument(
            "--late-fraction",
            type=float,
            default=0.0,
            help="share of records written late: into the file of event time LATENESS after their own",
        )
        p.add_argument(
            "--lateness",
            default="12s",
            help="how late a late record arrives, in event time (beyond a watermark delay and a batch's advance)",
        )
        for flag, kind, default, text in generator.options:
            p.add_argument(flag, type=kind, default=default, help=text)
        p.set_defaults(func=_generate)


def add_commands(commands: argparse._SubParsersAction, bench: argparse._SubParsersAction) -> None:
    """``misa gen ...``."""
    add_gen_parser(commands)
