"""``misa bench jobs``: Linear Road, NEXMark and YSB queries side by side in sync, misa and native modes.

Per workload and rate, one input is generated once (files of one second of event time) and every
query and mode reads it with ``--available-now --max-files-per-trigger F``: each batch holds F
seconds of data (3 by default, what a 3 s trigger collects at that rate), the same batches in
every mode. Each run is its own spark-submit with state and Spark's checkpoint on local disk. The
native reference of Q13 and YSB is one Spark batch job over the whole input (the issue's
reference); its row has one batch, its latency is that job's time.

Every runtime mode's output is checked against the native mode's of the same query and rate
(:func:`bench.runs.check_against_native`): batch by batch where both read the same files per batch, else
(the batch reference) as settled rows. A mode whose output differs gets no ratio, the difference is printed and
the command exits with :data:`~bench.same_output.DIFFER_EXIT`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench.runs import add_ratios, batch_stats, check_against_native, markdown_table, rows_per_batch, submit
from bench.same_output import Check, differ_exit, settled_keys
from jobs.gen.lr import generate_lr
from jobs.gen.nexmark import generate_nexmark
from jobs.gen.ysb import generate_ysb
from jobs.submit import MODES
from misa.cli.main import name_list


@dataclass(frozen=True)
class JobInput:
    """A generator and the job script whose queries read its data."""

    script: str
    generate: Callable[..., dict]


WORKLOADS = {
    "lr": JobInput("linear_road.py", generate_lr),
    "nexmark": JobInput("nexmark.py", generate_nexmark),
    "ysb": JobInput("ysb.py", generate_ysb),
}
QUERIES = {
    "lr2": "lr",
    "lr4": "lr",
    "q13": "nexmark",
    "q18": "nexmark",
    "q19": "nexmark",
    "q20": "nexmark",
    "ysb": "ysb",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("jobs", help="Linear Road, NEXMark and YSB latency and throughput per mode and rate")
    p.add_argument(
        "--queries",
        type=lambda t: name_list(t, QUERIES),
        default=list(QUERIES),
        help=f"comma-separated, of {','.join(QUERIES)} (default: all)",
    )
    p.add_argument(
        "--rates",
        type=lambda t: [float(r) for r in t.split(",")],
        default=[1500.0, 2500.0],
        help="records per second of event time, comma-separated (default: 1500,2500)",
    )
    p.add_argument(
        "--modes",
        type=lambda t: name_list(t, MODES),
        default=["sync", "misa", "native"],
    )
    p.add_argument("--batches", type=int, default=20, help="data batches per run, warm-up included")
    p.add_argument("--files-per-batch", type=int, default=3, help="seconds of event time per batch")
    p.add_argument("--warmup", type=int, default=3, help="first batches left out of the statistics")
    p.add_argument("--work", type=Path, default=Path("bench-out/jobs"), help="inputs, runs, metrics, summary")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.batches <= args.warmup:
        raise SystemExit(f"misa bench jobs: --batches {args.batches} must exceed --warmup {args.warmup}")
    rows = []
    checks: dict[str, Check] = {}
    for rate in args.rates:
        for query in args.queries:
            data = _input(args, QUERIES[query], rate)
            batch_rows = rows_per_batch(data, args.files_per_batch)
            runs = {}
            for mode in args.modes:
                rows.append(_run_one(args, query, rate, mode, data, batch_rows))
                runs[mode] = (_run_dir(args, query, rate, mode) / "out", _run_dir(args, query, rate, mode) / "ckpt")
                (args.work / "summary.json").write_text(json.dumps(rows, indent=1))
            for mode, check in check_against_native(rows[-len(args.modes) :], runs, settled_keys(query)).items():
                checks[f"{query}/{rate:g}/{mode}"] = check
                print(f"[{query}/{rate:g}/{mode}] {check.line()}", flush=True)
    add_ratios(rows, ["query", "rate"])
    (args.work / "summary.json").write_text(json.dumps(rows, indent=1))
    print("\n" + markdown_table(rows, ["query", "rate", "mode"]))
    return differ_exit(checks)


def _input(args: argparse.Namespace, workload: str, rate: float) -> Path:
    """The workload's input at ``rate`` for ``--batches`` batches, generated on first use."""
    data = args.work / "input" / f"{workload}-{rate:g}-{args.batches * args.files_per_batch}s"
    if not data.exists():
        seconds = args.batches * args.files_per_batch
        stats = WORKLOADS[workload].generate(data, rate, seconds, seed=1, files_per_second=1.0)
        print(f"generated {workload} at {rate:g}/s: {stats['records']} records in {stats['files']} files", flush=True)
    return data


def _run_dir(args: argparse.Namespace, query: str, rate: float, mode: str) -> Path:
    """The folder of one run: its output, Spark checkpoint and metrics."""
    return args.work / "runs" / f"{query}-{rate:g}-{mode}"


def _run_one(args: argparse.Namespace, query: str, rate: float, mode: str, data: Path, batch_rows: list[int]) -> dict:
    """One spark-submit run of ``query`` in ``mode``."""
    label = f"{query}/{rate:g}/{mode}"
    run_dir = _run_dir(args, query, rate, mode)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    metrics = run_dir / "metrics.jsonl"
    job_args = [
        "--query",
        query,
        "--mode",
        mode,
        "--input",
        str(data),
        "--output",
        str(run_dir / "out"),
        "--checkpoint",
        str(run_dir / "ckpt"),
        "--available-now",
        "--max-files-per-trigger",
        str(args.files_per_batch),
        "--metrics",
        str(metrics),
    ]
    print(f"[{label}] running ...", flush=True)
    wall = submit(WORKLOADS[QUERIES[query]].script, job_args, args.conf, label)
    row = {
        "query": query,
        "rate": f"{rate:g}",
        "mode": mode,
        **batch_stats(metrics, args.warmup, batch_rows),
        "wall_s": wall,
    }
    print(
        f"[{label}] p50 {row['p50']:.2f}s p99 {row['p99']:.2f}s {row['rows_per_s']:,.0f} rows/s ({wall:.0f}s)",
        flush=True,
    )
    return row
