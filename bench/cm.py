"""``misa bench cm``: CM2 side by side in the modes sync, async-ckpt, misa and native.

One input is generated once (files of one second of event time); every run reads it with the
same ``--max-files-per-trigger``, so each batch gets the same amount of data (a steady rate).
Each run is its own spark-submit; state and Spark's checkpoint go to the target directory (local
disk or the remote DFS mount). Latency is Spark's ``triggerExecution`` time of each batch, the
first ``--warmup`` batches excluded in every mode alike.

Every runtime mode's output is checked against the native mode's on the same target, batch by batch
(:func:`bench.runs.check_against_native`): a mode whose output differs gets no ratio, the difference is
printed and the command exits with :data:`~bench.same_output.DIFFER_EXIT`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from bench.runs import add_ratios, batch_stats, check_against_native, markdown_table, rows_per_batch, submit
from bench.same_output import Check, differ_exit, settled_keys
from common.location import local_location
from jobs.gen.cm import generate_cm


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cm", help="CM2 batch latency and throughput per commit mode and target")
    p.add_argument("--rate", type=float, default=4000, help="records per second of event time")
    p.add_argument("--jobs", type=int, default=40_000, help="distinct job ids (state size)")
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--files-per-batch", type=int, default=3, help="seconds of event time per batch")
    p.add_argument("--warmup", type=int, default=3, help="first batches left out of the statistics")
    p.add_argument("--modes", default="sync,async-ckpt,misa,native")
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="where state and Spark checkpoints go, repeatable (default: local=<work>/local)",
    )
    p.add_argument("--work", type=Path, default=Path("bench-out/cm"), help="input, outputs, metrics")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / "input"
    if not data.exists():
        stats = generate_cm(
            data,
            args.rate,
            args.batches * args.files_per_batch + args.files_per_batch,
            seed=1,
            files_per_second=1.0,
            jobs=args.jobs,
        )
        print(f"generated {stats['records']} records in {stats['files']} files", flush=True)
    targets = dict(t.split("=", 1) for t in args.target) or {"local": str(args.work / "local")}
    batch_rows = rows_per_batch(data, args.files_per_batch)
    rows = []
    checks: dict[str, Check] = {}
    modes = args.modes.split(",")
    for target, folder in targets.items():
        runs = {}
        for mode in modes:
            rows.append(_run_one(args, data, target, Path(folder), mode, batch_rows))
            runs[mode] = (_output(args, target, mode), Path(folder) / f"cm2-{mode}" / "spark")
        for mode, check in check_against_native(rows[-len(modes) :], runs, settled_keys("cm2")).items():
            checks[f"{target}/{mode}"] = check
            print(f"[{target}/{mode}] {check.line()}", flush=True)
    add_ratios(rows, ["target"])
    (args.work / "summary.json").write_text(json.dumps(rows, indent=1))
    print("\n" + markdown_table(rows, ["target", "mode"]))
    return differ_exit(checks)


def _output(args: argparse.Namespace, target: str, mode: str) -> Path:
    return args.work / "out" / f"{target}-{mode}"


def _run_one(args: argparse.Namespace, data: Path, target: str, folder: Path, mode: str, batch_rows: list[int]) -> dict:
    """One spark-submit run of CM2 in ``mode`` with state and Spark's checkpoint under ``folder``."""
    run_dir = folder / f"cm2-{mode}"
    local_state = args.work / "state" / f"{target}-{mode}"
    for stale in (run_dir, local_state, _output(args, target, mode)):
        shutil.rmtree(stale, ignore_errors=True)
    metrics = args.work / f"metrics-{target}-{mode}.jsonl"
    metrics.unlink(missing_ok=True)
    job_args = [
        "--query",
        "cm2",
        "--mode",
        mode,
        "--input",
        str(data),
        "--output",
        str(_output(args, target, mode)),
        "--checkpoint",
        str(run_dir / "spark"),
        "--state-dir",
        str(local_state),
        "--dfs",
        local_location(run_dir / "state").url,
        "--available-now",
        "--max-files-per-trigger",
        str(args.files_per_batch),
        "--metrics",
        str(metrics),
    ]
    print(f"[{target}/{mode}] running {args.batches} batches ...", flush=True)
    wall = submit("cluster_monitoring.py", job_args, args.conf, f"{target}/{mode}")
    row = {"target": target, "mode": mode, **batch_stats(metrics, args.warmup, batch_rows), "wall_s": wall}
    print(
        f"[{target}/{mode}] p50 {row['p50']:.2f}s p99 {row['p99']:.2f}s {row['rows_per_s']:,.0f} rows/s ({wall:.0f}s)",
        flush=True,
    )
    return row
