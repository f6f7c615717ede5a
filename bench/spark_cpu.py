"""``misa bench spark-cpu``: Spark's CPU per input record for a job, read from its event log.

Spark's part of a query runs in tasks on the executors, so it scales with them; what one executor core
does per record is the sum of the tasks' executor CPU time over the input records. Per query and mode
this generates one input (``--rate`` records a second of event time for ``--seconds``), runs the job with
``spark-submit`` (``local[2]``, ``--available-now``, ``--files-per-batch`` files a batch) with Spark's
event log on, and sums ``Executor CPU Time`` over the tasks of every batch after the first ``--warmup`` (the JVM
compiles its code in the first ones), divided by those batches' input records. In ``native`` mode that is the
whole query on Spark's tuned RocksDB store (:func:`jobs.submit.native_state_store_conf`); in ``misa`` mode
it is the Spark part only (parsing and the deltas), the driver's state phase being what
``misa bench ceiling`` measures. Together they give the cluster size at which Spark's own store would
overtake one misa driver (docs/benchmarks.md, the driver ceiling).

Each run keeps its output, and each runtime mode's is checked against the native mode's of the same query, batch
by batch (:func:`bench.runs.check_against_native`): a CPU figure of a run whose output differs means
nothing, so the difference is printed and the command exits with :data:`~bench.same_output.DIFFER_EXIT`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Callable

from bench.runs import check_against_native, rows_per_batch, submit
from bench.same_output import Check, differ_exit, settled_keys
from jobs.gen.cm import generate_cm
from jobs.gen.lr import generate_lr
from jobs.gen.nexmark import generate_nexmark
from misa.obs.report import load_metrics

QUERIES: dict[str, tuple[str, Callable[..., dict]]] = {  # query: (job script, generator)
    "cm2": ("cluster_monitoring.py", generate_cm),
    "lr2": ("linear_road.py", generate_lr),
    "q20": ("nexmark.py", generate_nexmark),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("spark-cpu", help="Spark's executor CPU per input record, per query and mode")
    p.add_argument("--queries", default="cm2,lr2,q20", help=f"comma-separated, from {', '.join(QUERIES)}")
    p.add_argument("--modes", default="native,misa", help="comma-separated job modes")
    p.add_argument("--rate", type=float, default=20_000, help="records per second of event time")
    p.add_argument("--seconds", type=int, default=30, help="seconds of event time (one file each)")
    p.add_argument("--files-per-batch", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2, help="first batches left out")
    p.add_argument("--work", type=Path, default=Path("bench-out/spark-cpu"))
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    queries = [q for q in args.queries.split(",") if q]
    unknown = [q for q in queries if q not in QUERIES]
    if unknown:
        raise SystemExit(f"misa bench spark-cpu: --queries {','.join(unknown)}: use {', '.join(QUERIES)}")
    rows = []
    checks: dict[str, Check] = {}
    for query in queries:
        data = _input(args, query)
        batch_rows = rows_per_batch(data, args.files_per_batch)
        records = sum(batch_rows[args.warmup :])
        runs = {}
        for mode in args.modes.split(","):
            runs[mode] = (_run_dir(args, query, mode) / "out", _run_dir(args, query, mode) / "ckpt")
            cpu_s, tasks, deltas = _run(args, query, mode, data)
            row = {
                "query": query,
                "mode": mode,
                "records": records,
                "tasks": tasks,
                "executor_cpu_s": round(cpu_s, 2),
                "executor_cpu_us_per_record": round(cpu_s / records * 1e6, 2),
            }
            if deltas is not None:
                row["deltas_per_record"] = round(deltas / records, 3)
            print(json.dumps(row), flush=True)
            rows.append(row)
        for mode, check in check_against_native(rows[-len(runs) :], runs, settled_keys(query)).items():
            checks[f"{query}/{mode}"] = check
            print(f"[{query}/{mode}] {check.line()}", flush=True)
    (args.work / "summary.json").write_text(json.dumps(rows, indent=1))
    return differ_exit(checks)


def _run_dir(args: argparse.Namespace, query: str, mode: str) -> Path:
    return args.work / "runs" / f"{query}-{mode}"


def _input(args: argparse.Namespace, query: str) -> Path:
    """The query's input, generated on first use."""
    data = args.work / "input" / f"{query}-{args.rate:g}-{args.seconds}s"
    done = data.with_suffix(".done")
    if not done.exists():
        shutil.rmtree(data, ignore_errors=True)
        QUERIES[query][1](data, args.rate, args.seconds, seed=1, files_per_second=1.0)
        done.touch()
    return data


def _run(args: argparse.Namespace, query: str, mode: str, data: Path) -> tuple[float, int, int | None]:
    """One run of ``query`` in ``mode``: its tasks' executor CPU seconds, their count and (misa's modes) the deltas
    its batches handed to the state phase."""
    run_dir = _run_dir(args, query, mode)
    shutil.rmtree(run_dir, ignore_errors=True)
    events = run_dir / "events"
    events.mkdir(parents=True)
    job_args = ["--query", query, "--mode", mode, "--input", str(data), "--output", str(run_dir / "out")]
    job_args += ["--checkpoint", str(run_dir / "ckpt"), "--available-now"]
    job_args += ["--max-files-per-trigger", str(args.files_per_batch), "--metrics", str(run_dir / "metrics.jsonl")]
    conf = [
        "spark.eventLog.enabled=true",
        f"spark.eventLog.dir=file://{events.resolve()}",
        "spark.eventLog.compress=false",
        *args.conf,
    ]
    submit(QUERIES[query][0], job_args, conf, f"{query}/{mode}")
    records, _ = load_metrics(run_dir / "metrics.jsonl")
    deltas = [r["deltas"] for r in records if r["batch_id"] >= args.warmup and "deltas" in r]
    return (*executor_cpu(events, args.warmup), sum(deltas) if deltas else None)


def executor_cpu(events: Path, warmup: int) -> tuple[float, int]:
    """Executor CPU seconds summed over the tasks of the streaming batches from ``warmup`` on (a job's batch is its
    ``streaming.sql.batchId`` property) in the event logs under ``events``, and the count of those tasks."""
    batch_of_stage: dict[int, int] = {}
    nanos = tasks = 0
    for log in sorted(f for f in events.rglob("events_*") if f.is_file()):
        with log.open() as lines:
            for line in lines:
                if '"SparkListenerJobStart"' in line:
                    event = json.loads(line)
                    batch = (event.get("Properties") or {}).get("streaming.sql.batchId")
                    for stage in event.get("Stage IDs", []):
                        batch_of_stage[stage] = -1 if batch is None else int(batch)
                elif '"SparkListenerTaskEnd"' in line:
                    event = json.loads(line)
                    if batch_of_stage.get(event["Stage ID"], -1) >= warmup:
                        nanos += int((event.get("Task Metrics") or {}).get("Executor CPU Time", 0))
                        tasks += 1
    return nanos / 1e9, tasks
