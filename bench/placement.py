"""``misa bench placement``: the driver's own CPU per input record with the state on the driver and on the executors,
and with Spark's own store (``native``: what Spark's driver spends on the same query, the floor of any placement).

One CM2 input (``--records`` records over 60 s of event time, a file every ``--file-seconds`` seconds) is generated
once; per placement, CM2 as a Spark user writes it (``jobs/cluster_monitoring.py --from-query``: ``misa.from_query``,
``--available-now``, one file a batch, the output written by the Parquet sink) runs with ``spark-submit`` on the same
``--master`` (``local-cluster[2,2,1024]``: two executor JVMs) with ``--hosts`` key partitions: the driver's worker
processes (``driver``) or state hosts on the executors (``executors``); ``native`` runs the same query in plain
Spark with its RocksDB store tuned as its documentation advises, its output written from the executors. While it
runs, every process of the run is sampled from ``/proc`` every 0.2 s (user and system time): the driver's are the
driver JVM (with a local cluster, its master and workers run in it too), the job's Python process and its state
worker processes; the executors' are each executor JVM and every process below it (Python workers, the state hosts).
A process's last 0.2 s before it exits can be missed, the same way in every run.

Each run keeps its output (the job's Parquet folder per batch id); with ``native`` among the runs, each placement's
output is checked against it batch by batch (:mod:`bench.same_output`). A placement whose output differs gets
no ratio (the difference is printed, the command exits with :data:`~bench.same_output.DIFFER_EXIT`); without
``native`` the outputs are not checked, and the line says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.runs import ROOT, submit_env
from bench.same_output import Check, compare_runs, differ_exit, settled_keys
from jobs.gen.cm import generate_cm
from misa.cli.main import name_list
from misa.obs.report import load_metrics

PLACEMENTS = ("driver", "executors")
RUNS = (*PLACEMENTS, "native")  # native: Spark's own store on the same cluster
_TICKS = os.sysconf("SC_CLK_TCK")
_EXECUTOR = b"CoarseGrainedExecutorBackend"
EXECUTORS = "executors"  # every executor JVM and every process below one


def _kind(cmdline: bytes) -> str:
    """What a driver-side process is, by its command line."""
    if b"java" in cmdline.split(b"\0")[0] or b"spark-submit" in cmdline:
        return "driver JVM"
    if b"spawn_main" in cmdline:
        return "state worker processes"
    if b"pyspark." in cmdline:
        return "driver's Python workers"
    return "driver Python"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("placement", help="the driver's CPU per record, state on the driver or the executors")
    p.add_argument("--records", type=int, default=1_200_000, help="input records (over 60 s of event time)")
    p.add_argument("--file-seconds", type=int, default=6, help="seconds of event time per file (one file a batch)")
    p.add_argument("--warmup", type=int, default=3, help="first batches not measured (the JVMs' compilation)")
    p.add_argument("--hosts", type=int, default=2, help="key partitions (spark.misa.state.processes)")
    p.add_argument(
        "--runs", type=lambda t: name_list(t, RUNS), default=list(RUNS), help="driver,executors (placements),native"
    )
    p.add_argument("--master", default="local-cluster[2,2,1024]")
    p.add_argument("--work", default="bench-placement", help="folder for the input and the runs (replaced)")
    p.set_defaults(func=run)


@dataclass
class Usage:
    """CPU seconds of a run's processes by kind (:func:`_kind`): the executors' and the driver's kinds."""

    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def executors_s(self) -> float:
        return self.seconds.get(EXECUTORS, 0.0)

    @property
    def driver_s(self) -> float:
        return sum(s for kind, s in self.seconds.items() if kind != EXECUTORS)

    def __sub__(self, other: Usage) -> Usage:
        return Usage({kind: s - other.seconds.get(kind, 0.0) for kind, s in self.seconds.items()})


def run(args: argparse.Namespace) -> int:
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    data = work / "input"
    seconds = 60
    stats = generate_cm(
        data, rate=args.records / seconds, seconds=seconds, seed=1, files_per_second=1 / args.file_seconds
    )
    rows = []
    for placement in args.runs:
        run_dir = work / placement
        started = time.monotonic()
        run_dir.mkdir(parents=True)
        metrics = run_dir / "metrics.jsonl"
        usage = _measured(_command(args, placement, data, run_dir), run_dir / "driver.log", metrics, args.warmup)
        wall = time.monotonic() - started
        # every input record is read, but Spark counts only those past the filter it pushes into the JSON scan: the
        # measured batches' share of the input is their share of those
        counted = [r.get("spark_input_rows", 0) for r in load_metrics(metrics)[0]]
        records = round(stats["records"] * sum(counted[args.warmup :]) / max(1, sum(counted)))
        batches = len(counted) - args.warmup
        rows.append(
            {
                "placement": placement,
                "records": records,
                "batches": batches,
                "wall_s": round(wall, 1),
                "driver_cpu_s": round(usage.driver_s, 2),
                "driver_us_per_record": round(usage.driver_s / max(1, records) * 1e6, 2),
                "executors_cpu_s": round(usage.executors_s, 2),
                "executors_us_per_record": round(usage.executors_s / max(1, records) * 1e6, 2),
                "driver_cpu_s_by_process": {k: round(v, 2) for k, v in usage.seconds.items() if k != EXECUTORS},
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    checks = check_outputs(rows, work)
    print(_table(rows))
    per_record = {row["placement"]: row["driver_us_per_record"] for row in rows}
    for run, base in (("executors", "driver"), ("native", "driver"), ("executors", "native")):
        differing = [name for name in (run, base) if name in checks and not checks[name].same]
        if differing:
            what = f"{' and '.join(differing)}'s output differs from native's"
            print(f"driver CPU per record, {run} / {base}: {what}, no ratio reported")
        elif run in per_record and base in per_record:
            print(f"driver CPU per record, {run} / {base}: {per_record[run] / max(1e-9, per_record[base]):.3f}")
    return differ_exit(checks)


def check_outputs(rows: list[dict], work: Path) -> dict[str, Check]:
    """Each placement's output against the native run's (batch by batch: both read one file a batch), noted in its
    row's ``output``; the checks by placement (none without a native run)."""
    runs = [row["placement"] for row in rows]
    if "native" not in runs:
        print("outputs not checked: no native run (--runs ...,native) to check them against", flush=True)
        return {}
    checks = {}
    for row in rows:
        if row["placement"] != "native":
            run, native = work / row["placement"], work / "native"
            check = compare_runs((run / "out", run / "ckpt"), (native / "out", native / "ckpt"), settled_keys("cm2"))
            checks[row["placement"]] = check
            row["output"] = "same as native" if check.same else "DIFFERS from native"
            print(f"[{row['placement']}] {check.line()}", flush=True)
    return checks


def _command(args: argparse.Namespace, run: str, data: Path, run_dir: Path) -> list[str]:
    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"}
    if run in PLACEMENTS:
        conf |= {"spark.misa.state.placement": run, "spark.misa.state.processes": str(args.hosts)}
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", args.master, "--driver-memory", "4g"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd + [
        str(ROOT / "jobs" / "cluster_monitoring.py"),
        *("--query", "cm2", "--mode", "native" if run == "native" else "misa", "--from-query"),
        *("--input", str(data), "--output", str(run_dir / "out")),
        *("--checkpoint", str(run_dir / "ckpt"), "--metrics", str(run_dir / "metrics.jsonl")),
        *("--available-now", "--max-files-per-trigger", "1", "--quiet"),
    ]


def _measured(cmd: list[str], log: Path, metrics: Path, warmup: int) -> Usage:
    """Run ``cmd`` (spark-submit, which becomes the driver JVM) to its end, its output in ``log``, sampling its
    processes' CPU: what they used after the first ``warmup`` batches (lines of ``metrics``) ended."""
    with log.open("w") as out:
        process = subprocess.Popen(cmd, env=submit_env(), stdout=out, stderr=subprocess.STDOUT)
        return _sampled(process, log, metrics, warmup)


def _sampled(process: subprocess.Popen, log: Path, metrics: Path, warmup: int) -> Usage:
    seen: dict[int, tuple[str, float]] = {}  # pid: (its kind, CPU seconds)
    warm: Usage | None = None
    while process.poll() is None:
        for pid, (kind, cpu) in _tree(process.pid).items():
            was, used = seen.get(pid, (kind, 0.0))
            # a process is an executor's once seen below one (its parent may end before it); else it keeps its kind
            seen[pid] = (EXECUTORS if EXECUTORS in (was, kind) else was, max(cpu, used))
        if warm is None and metrics.exists() and len(metrics.read_text().splitlines()) >= warmup:
            warm = _usage(seen)
        time.sleep(0.2)
    if process.returncode != 0 or warm is None:
        raise RuntimeError(f"the run failed (exit {process.returncode}) or ran no more than --warmup batches: {log}")
    return _usage(seen) - warm


def _usage(seen: dict[int, tuple[str, float]]) -> Usage:
    """The CPU seconds of the processes seen so far, by kind."""
    usage = Usage()
    for kind, cpu in seen.values():
        usage.seconds[kind] = usage.seconds.get(kind, 0.0) + cpu
    return usage


def _tree(root: int) -> dict[int, tuple[str, float]]:
    """Every live process at or below ``root``: its kind (:data:`EXECUTORS` for an executor JVM and the processes
    below it) and its CPU seconds."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    cmdlines: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdlines[int(entry)] = f.read()
        except OSError:  # it ended
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / _TICKS
    found: dict[int, tuple[str, float]] = {}
    for pid in parents:
        chain, node = [pid], pid
        while node in parents and node != root:
            node = parents[node]
            chain.append(node)
        if node == root:
            executor = any(_EXECUTOR in cmdlines.get(p, b"") for p in chain)
            found[pid] = (EXECUTORS if executor else _kind(cmdlines[pid]), cpu[pid])
    return found


def _table(rows: list[dict]) -> str:
    """The rows as a Markdown table (a column a row lacks, such as native's ``output``, shows ``-``)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(str(row.get(c, "-")) for c in columns) + " |" for row in rows])
