"""``misa bench placement``: the driver's own CPU per input record with the state on the driver and on the executors.

One CM2 input (``--records`` records over 60 s of event time, a file every ``--file-seconds`` seconds) is
generated once; per placement, CM2 (``jobs/cluster_monitoring.py``, ``--available-now``,
one file a batch) runs with ``spark-submit`` on the same ``--master`` (``local-cluster[2,2,1024]``: two executor
JVMs) with ``--hosts`` key partitions: the driver's worker processes (``driver``) or state hosts on the executors
(``executors``). While it runs, every process of the run is sampled from ``/proc`` every 0.2 s (user and system
time): the driver's are the driver JVM, the job's Python process and its state worker processes; the executors'
are each executor JVM and every process below it (Python workers, the state hosts). A process's last 0.2 s
before it exits can be missed, the same way in both placements.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from jobs.bench.runs import ROOT, submit_env
from jobs.gen.cm import generate_cm
from misa.obs.report import load_metrics

PLACEMENTS = ("driver", "executors")
_TICKS = os.sysconf("SC_CLK_TCK")
_EXECUTOR = b"CoarseGrainedExecutorBackend"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("placement", help="the driver's CPU per record, state on the driver or the executors")
    p.add_argument("--records", type=int, default=300_000, help="input records (over 60 s of event time)")
    p.add_argument("--file-seconds", type=int, default=3, help="seconds of event time per file (one file a batch)")
    p.add_argument("--hosts", type=int, default=2, help="key partitions (spark.misa.state.processes)")
    p.add_argument("--master", default="local-cluster[2,2,1024]")
    p.add_argument("--work", default="bench-placement", help="folder for the input and the runs (replaced)")
    p.set_defaults(func=run)


@dataclass
class Usage:
    """CPU seconds of a run's processes: the driver's and the executors'."""

    driver_s: float = 0.0
    executors_s: float = 0.0


def run(args: argparse.Namespace) -> int:
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    data = work / "input"
    seconds = 60
    generate_cm(data, rate=args.records / seconds, seconds=seconds, seed=1, files_per_second=1 / args.file_seconds)
    rows = []
    for placement in PLACEMENTS:
        run_dir = work / placement
        started = time.monotonic()
        run_dir.mkdir(parents=True)
        usage = _measured(_command(args, placement, data, run_dir), run_dir / "driver.log")
        wall = time.monotonic() - started
        records = sum(r.get("input_rows", 0) for r in load_metrics(run_dir / "metrics.jsonl")[0])
        rows.append(
            {
                "placement": placement,
                "records": records,
                "wall_s": round(wall, 1),
                "driver_cpu_s": round(usage.driver_s, 2),
                "driver_us_per_record": round(usage.driver_s / max(1, records) * 1e6, 2),
                "executors_cpu_s": round(usage.executors_s, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    ratio = rows[1]["driver_us_per_record"] / max(1e-9, rows[0]["driver_us_per_record"])
    print(_table(rows))
    print(f"driver CPU per record, executors / driver: {ratio:.3f}")
    return 0


def _command(args: argparse.Namespace, placement: str, data: Path, run_dir: Path) -> list[str]:
    conf = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.showConsoleProgress": "false",
        "spark.misa.state.placement": placement,
        "spark.misa.state.processes": str(args.hosts),
    }
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", args.master, "--driver-memory", "2g"]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd + [
        str(ROOT / "jobs" / "cluster_monitoring.py"),
        *("--query", "cm2", "--mode", "misa", "--input", str(data), "--output", str(run_dir / "out")),
        *("--checkpoint", str(run_dir / "ckpt"), "--metrics", str(run_dir / "metrics.jsonl")),
        *("--available-now", "--max-files-per-trigger", "1", "--quiet"),
    ]


def _measured(cmd: list[str], log: Path) -> Usage:
    """Run ``cmd`` (spark-submit, which becomes the driver JVM) to its end, its output in ``log``, sampling its
    processes' CPU."""
    with log.open("w") as out:
        process = subprocess.Popen(cmd, env=submit_env(), stdout=out, stderr=subprocess.STDOUT)
        return _sampled(process, log)


def _sampled(process: subprocess.Popen, log: Path) -> Usage:
    seen: dict[int, tuple[bool, float]] = {}  # pid: (an executor's, CPU seconds)
    while process.poll() is None:
        for pid, (executor, cpu) in _tree(process.pid).items():
            seen[pid] = (executor, max(cpu, seen.get(pid, (executor, 0.0))[1]))
        time.sleep(0.2)
    if process.returncode != 0:
        raise RuntimeError(f"the run failed (exit {process.returncode}); its output: {log}")
    usage = Usage()
    for executor, cpu in seen.values():
        if executor:
            usage.executors_s += cpu
        else:
            usage.driver_s += cpu
    return usage


def _tree(root: int) -> dict[int, tuple[bool, float]]:
    """Every live process at or below ``root``: whether it is (or runs under) an executor JVM, and its CPU seconds."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    executors: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if _EXECUTOR in f.read():
                    executors.add(int(entry))
        except OSError:  # it ended
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / _TICKS
    found: dict[int, tuple[bool, float]] = {}
    for pid in parents:
        chain, node = [], pid
        while node in parents and node != root:
            chain.append(node)
            node = parents[node]
        if node == root:
            found[pid] = (any(p in executors for p in chain), cpu[pid])
    if root in cpu:
        found[root] = (False, cpu[root])
    return found


def _table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in rows])
