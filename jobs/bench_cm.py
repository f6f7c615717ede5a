"""``misa bench cm``: CM2 side by side in the modes sync, async-ckpt, misa and native.

One input is generated once (files of one second of event time); every run reads it with the
same ``--max-files-per-trigger``, so each batch gets the same amount of data (a steady rate).
Each run is its own spark-submit; state and Spark's checkpoint go to the target directory (local
disk or the remote DFS mount). Latency is Spark's ``triggerExecution`` time of each batch, the
first ``--warmup`` batches excluded in every mode alike.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from misa.report import load_metrics, summarize

from .gen_cm import generate_cm

ROOT = Path(__file__).resolve().parents[1]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cm", help="CM2 batch latency and throughput per commit mode and target")
    p.add_argument("--rate", type=float, default=4000, help="records per second of event time")
    p.add_argument("--jobs", type=int, default=40_000, help="distinct job ids (state size)")
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--files-per-batch", type=int, default=3, help="seconds of event time per batch")
    p.add_argument("--warmup", type=int, default=3, help="first batches left out of the statistics")
    p.add_argument("--modes", default="sync,async-ckpt,misa,native")
    p.add_argument("--target", action="append", default=[], metavar="NAME=DIR",
                   help="where state and Spark checkpoints go, repeatable (default: local=<work>/local)")
    p.add_argument("--work", type=Path, default=Path("bench-out/cm"), help="input, outputs, metrics")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / "input"
    if not data.exists():
        stats = generate_cm(data, args.rate, args.batches * args.files_per_batch + args.files_per_batch,
                            seed=1, files_per_second=1.0, jobs=args.jobs)
        print(f"generated {stats['records']} records in {stats['files']} files", flush=True)
    targets = dict(t.split("=", 1) for t in args.target) or {"local": str(args.work / "local")}
    per_file = [sum(1 for _ in f.open()) for f in sorted(data.glob("part-*.json"))]
    batch_rows = [sum(per_file[i : i + args.files_per_batch]) for i in range(0, len(per_file), args.files_per_batch)]
    rows = []
    for target, folder in targets.items():
        for mode in args.modes.split(","):
            rows.append(_run_one(args, data, target, Path(folder), mode, batch_rows))
    _add_ratios(rows)
    (args.work / "summary.json").write_text(json.dumps(rows, indent=1))
    print("\n| target | mode | batches | p50 (s) | p99 (s) | rows/s | p99 / sync | p99 / native | rows/s / sync |"
          " max state keys |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['target']} | {r['mode']} | {r['batches']} | {r['p50']:.2f} | {r['p99']:.2f} | "
              f"{r['rows_per_s']:,.0f} | {r.get('p99_vs_sync', float('nan')):.2f} | "
              f"{r.get('p99_vs_native', float('nan')):.2f} | {r.get('tput_vs_sync', float('nan')):.2f} | "
              f"{r['state_keys'] or 'n/a'} |")
    return 0


def _run_one(args: argparse.Namespace, data: Path, target: str, folder: Path, mode: str,
             batch_rows: list[int]) -> dict:
    """One spark-submit run; throughput counts the records of each batch's input files, because
    Spark's numInputRows is taken after filter pushdown in native mode and before it otherwise."""
    run_dir = folder / f"cm2-{mode}"
    local_state = args.work / "state" / f"{target}-{mode}"
    for stale in (run_dir, local_state):
        shutil.rmtree(stale, ignore_errors=True)
    metrics = args.work / f"metrics-{target}-{mode}.jsonl"
    metrics.unlink(missing_ok=True)
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "--driver-memory", "4g",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4"]
    for extra in args.conf:
        cmd += ["--conf", extra]
    cmd += [str(ROOT / "jobs" / "cluster_monitoring.py"), "--query", "cm2", "--mode", mode,
            "--input", str(data), "--output", str(args.work / "out" / f"{target}-{mode}"),
            "--checkpoint", str(run_dir / "spark"), "--state-dir", str(local_state),
            "--dfs", f"file://{run_dir / 'state'}", "--available-now",
            "--max-files-per-trigger", str(args.files_per_batch), "--metrics", str(metrics), "--quiet"]
    print(f"[{target}/{mode}] running {args.batches} batches ...", flush=True)
    started = time.monotonic()
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{target}/{mode} failed:\n{done.stderr[-4000:]}")
    records, _ = load_metrics(metrics)
    kept = [r for r in records if r["batch_id"] >= args.warmup]
    summary = summarize(kept)
    input_rows = sum(batch_rows[r["batch_id"]] for r in kept if r["batch_id"] < len(batch_rows))
    row = {"target": target, "mode": mode, "batches": len(kept), "p50": summary["latency_s"]["p50"],
           "p99": summary["latency_s"]["p99"], "rows_per_s": input_rows / sum(r["latency_s"] for r in kept),
           "state_keys": max((r.get("state_keys") or 0 for r in kept), default=None) or None,
           "wall_s": time.monotonic() - started}
    print(f"[{target}/{mode}] p50 {row['p50']:.2f}s p99 {row['p99']:.2f}s {row['rows_per_s']:,.0f} rows/s "
          f"({row['wall_s']:.0f}s)", flush=True)
    return row


def _add_ratios(rows: list[dict]) -> None:
    for row in rows:
        peers = {r["mode"]: r for r in rows if r["target"] == row["target"]}
        if "sync" in peers:
            row["p99_vs_sync"] = row["p99"] / peers["sync"]["p99"]
            row["tput_vs_sync"] = row["rows_per_s"] / peers["sync"]["rows_per_s"]
        if "native" in peers:
            row["p99_vs_native"] = row["p99"] / peers["native"]["p99"]
