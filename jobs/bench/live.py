"""``misa bench live``: every mode against a live source at a fixed rate, with a real processing-time trigger.

Per query and rate, one input of one-second files is generated once. For each mode, the job runs as
its own ``spark-submit --trigger 3s`` on an empty input folder, with Spark's checkpoint and the
durable state on the target (local disk or a mounted remote DFS); once Spark has started the
query, a feeder copies the files into the input folder in wall-clock time (temporary dot name,
then a rename), one per second. A mode whose batch takes longer than the trigger falls behind: its
next batch grows and the latency runs away, which is what this measures (:mod:`live_stats`):
batch latency p50/p99 and end-to-end latency per record (file arrival to the end of the batch that
read it; files never read count until the run stopped), the first ``--warmup`` batches and their files
left out of both, the backlog when the feed stops, and with
``--find-capacity`` the highest rate each mode sustains (the rate stepped up by ``--step`` until
the batch p99 exceeds the trigger or the backlog at the feed's stop exceeds two triggers' files: one
batch running and one trigger's arrivals).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from jobs.bench.live_stats import (
    PREFETCH_COUNTS,
    Arrival,
    backlog_at,
    batch_ends,
    batch_latency,
    end_to_end,
    file_batches,
    weighted_percentile,
)
from jobs.bench.queries import name_list
from jobs.bench.runs import submit_command, submit_env
from jobs.gen.cm import generate_cm
from jobs.gen.lr import generate_lr
from jobs.gen.nexmark import generate_nexmark
from jobs.submit import MODES, RUNTIME_MODES


def _cm(jobs: int) -> Callable[[Path, float, int], dict]:
    return lambda out, rate, seconds: generate_cm(out, rate, seconds, seed=1, jobs=jobs, progress=False)


def _lr(out: Path, rate: float, seconds: int) -> dict:
    return generate_lr(out, rate, seconds, seed=1, progress=False)


def _nexmark(out: Path, rate: float, seconds: int) -> dict:
    return generate_nexmark(out, rate, seconds, seed=1, progress=False)


QUERIES = {
    "cm1": "cluster_monitoring.py",
    "cm2": "cluster_monitoring.py",
    "lr2": "linear_road.py",
    "lr4": "linear_road.py",
    "q20": "nexmark.py",
}
WORKLOADS = {"cluster_monitoring.py": "cm", "linear_road.py": "lr", "nexmark.py": "nexmark"}


@dataclass(frozen=True)
class Variant:
    """A named set of extra Spark settings every mode runs with (``--variant``); the unnamed one adds none."""

    name: str = ""
    conf: tuple[str, ...] = ()

    @staticmethod
    def parse(text: str) -> Variant:
        """``NAME:KEY=VALUE[,KEY=VALUE...]``, e.g. ``prefetch:spark.misa.prefetch.enabled=true``."""
        name, sep, settings = text.partition(":")
        conf = tuple(s for s in settings.split(",") if s)
        if not sep or not name or not conf or any("=" not in s for s in conf):
            raise argparse.ArgumentTypeError(f"{text!r}: use NAME:KEY=VALUE[,KEY=VALUE...]")
        return Variant(name, conf)


@dataclass
class LiveRun:
    """One mode of one query at one rate on one target: its files' arrivals and where it wrote."""

    query: str
    mode: str
    variant: str
    rate: float
    target: str
    folder: Path  # the run's folder on the target: Spark's checkpoint, durable state, output
    work: Path  # the run's local folder: input folder, local state, metrics, log
    arrivals: list[Arrival] = field(default_factory=list)
    feed_stopped: float = 0.0
    stopped: float = 0.0

    def result(self, trigger_s: float, warmup: int) -> dict:
        """The run's figures (see the module docstring)."""
        checkpoint, metrics = self.folder / "checkpoint", self.work / "metrics.jsonl"
        batch_of, ends = file_batches(checkpoint), batch_ends(metrics)
        measured = [a for a in self.arrivals if batch_of.get(a.name, warmup) >= warmup]  # not the warm-up's
        latency, records = end_to_end(measured, batch_of, ends, self.stopped)
        files, backlog = backlog_at(self.arrivals, batch_of, ends, self.feed_stopped)
        row = {
            "query": self.query,
            "mode": self.mode,
            "variant": self.variant,
            "rate": self.rate,
            "target": self.target,
            **batch_latency(metrics, warmup),
            "e2e_p50": weighted_percentile(latency, records, 50),
            "e2e_p99": weighted_percentile(latency, records, 99),
            "backlog_files": files,
            "backlog_records": backlog,
            "unprocessed_files": sum(1 for a in self.arrivals if a.name not in batch_of),
        }
        # held: batches within the trigger, and no more waiting than one batch running and one trigger's arrivals
        row["sustained"] = bool(
            row["batch_p99"] is not None and row["batch_p99"] <= trigger_s and files <= 2 * trigger_s + 1
        )
        return row


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("live", help="every mode against a live source at a fixed rate, 3 s trigger")
    p.add_argument("--queries", type=lambda t: name_list(t, QUERIES), default=["cm2"], help="cm1,cm2,lr2,lr4,q20")
    p.add_argument(
        "--modes", type=lambda t: name_list(t, MODES), default=["misa", "sync", "nocommit", "native", "native-default"]
    )
    p.add_argument("--rates", type=lambda t: [float(r) for r in t.split(",")], default=[1500.0, 2500.0])
    p.add_argument("--seconds", type=int, default=90, help="seconds of input fed per run")
    p.add_argument("--trigger", default="3s")
    p.add_argument("--warmup", type=int, default=3, help="first batches left out of the batch latency")
    p.add_argument("--jobs", type=int, default=50_000, help="CM job ids (CM2 state grows with them)")
    p.add_argument("--watermark-delay", help="the jobs' allowed lateness (default theirs: 10s); state grows with it")
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="where Spark's checkpoint and the durable state go, repeatable (default local=WORK/local)",
    )
    p.add_argument("--find-capacity", action="store_true", help="step each mode's rate up until it no longer holds")
    p.add_argument("--step", type=float, default=1.25, help="rate factor per capacity step")
    p.add_argument("--max-rate", type=float, default=40_000)
    p.add_argument("--work", type=Path, default=Path("bench-out/live"))
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.add_argument(
        "--variant",
        type=Variant.parse,
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="run every mode once per variant, with its settings added; repeatable (e.g. prefetch on and off)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    args.work.mkdir(parents=True, exist_ok=True)
    trigger_s = float(args.trigger.rstrip("s"))
    targets = dict(t.split("=", 1) for t in args.target) or {"local": str(args.work / "local")}
    out = args.work / "live.jsonl"
    rows = []
    runs = itertools.product(args.queries, targets.items(), args.modes, args.variant or [Variant()])
    for query, (target, folder), mode, variant in runs:
        rates = list(args.rates)
        for rate in rates:  # with --find-capacity, the next rate is appended while the last one held
            row = _measure(args, query, mode, variant, rate, target, Path(folder), trigger_s)
            rows.append(row)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(_line(row), flush=True)
            if args.find_capacity and rate == rates[-1] and row["sustained"] and rate * args.step <= args.max_rate:
                rates.append(round(rate * args.step))
    table = markdown(rows, args.find_capacity)
    (args.work / "live.md").write_text(table + "\n")
    print("\n" + table)
    return 0


def _measure(
    args: argparse.Namespace,
    query: str,
    mode: str,
    variant: Variant,
    rate: float,
    target: str,
    folder: Path,
    trigger_s: float,
) -> dict:
    name = "-".join(filter(None, (query, mode, variant.name, str(int(rate)))))
    live = LiveRun(query, mode, variant.name, rate, target, folder / name, args.work / "runs" / f"{target}-{name}")
    for stale in (live.folder, live.work):
        shutil.rmtree(stale, ignore_errors=True)
    live.work.mkdir(parents=True)
    files = _input(args, query, rate)
    feed = live.work / "input"
    feed.mkdir()
    process = _submit(args, live, feed, variant.conf)
    try:
        _wait_started(live.folder / "checkpoint", process)
        _feed(files, feed, live)
        live.feed_stopped = time.time()
        _drain(live, files, 3 * trigger_s, process)
    finally:
        live.stopped = time.time()
        _stop(process)
    return live.result(trigger_s, args.warmup)


def _input(args: argparse.Namespace, query: str, rate: float) -> list[Path]:
    """The query's input at ``rate``: one file per second, generated once per workload and rate."""
    workload = WORKLOADS[QUERIES[query]]
    folder = args.work / "inputs" / f"{workload}-{int(rate)}-{args.seconds}"
    if not folder.exists():
        staging = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        generate = {"cm": _cm(args.jobs), "lr": _lr, "nexmark": _nexmark}[workload]
        generate(staging, rate, args.seconds)
        staging.rename(folder)
    return sorted(folder.glob("part-*.json"))


def _submit(args: argparse.Namespace, live: LiveRun, feed: Path, conf: tuple[str, ...]) -> subprocess.Popen:
    """Start the run's job in its own process group (the feed and the stop are the caller's)."""
    job_args = ["--query", live.query, "--mode", live.mode, "--input", str(feed), "--output",
                str(live.folder / "output"), "--checkpoint", str(live.folder / "checkpoint"), "--trigger", args.trigger,
                "--metrics", str(live.work / "metrics.jsonl")]  # fmt: skip
    if args.watermark_delay:
        job_args += ["--watermark-delay", args.watermark_delay]
    if live.mode in RUNTIME_MODES:
        job_args += ["--state-dir", str(live.work / "state"), "--dfs", f"file://{live.folder / 'misa-state'}"]
    log = (live.work / "run.log").open("w")
    command = submit_command(QUERIES[live.query], job_args, [*args.conf, *conf])
    return subprocess.Popen(command, env=submit_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_started(checkpoint: Path, process: subprocess.Popen, timeout_s: float = 180) -> None:
    """Wait until Spark has started the query (it writes ``checkpoint/metadata`` first)."""
    deadline = time.monotonic() + timeout_s
    while not (checkpoint / "metadata").exists():
        if process.poll() is not None:
            raise RuntimeError(f"the job ended before its query started (exit {process.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the query did not start within {timeout_s:.0f} s")
        time.sleep(0.2)


def _feed(files: list[Path], feed: Path, live: LiveRun) -> None:
    """Copy one file per wall-clock second into ``feed`` (dot name, then rename), recording arrivals."""
    started = time.time()
    for index, source in enumerate(files):
        time.sleep(max(0.0, started + index - time.time()))
        staging = feed / f".{source.name}.tmp"
        shutil.copyfile(source, staging)
        os.replace(staging, feed / source.name)
        records = sum(1 for _ in source.open())
        live.arrivals.append(Arrival(source.name, time.time(), records))


def _drain(live: LiveRun, files: list[Path], timeout_s: float, process: subprocess.Popen) -> None:
    """Give the job ``timeout_s`` to finish the fed files (what is left then counts as backlog)."""
    deadline = time.monotonic() + timeout_s
    names = {f.name for f in files}
    while time.monotonic() < deadline and process.poll() is None:
        done = file_batches(live.folder / "checkpoint")
        ends = batch_ends(live.work / "metrics.jsonl")
        if all(name in done and done[name] in ends for name in names):
            return
        time.sleep(0.5)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _mode(row: dict) -> str:
    """The run's mode with its variant, if any."""
    return f"{row['mode']} {row['variant']}" if row.get("variant") else row["mode"]


def _line(row: dict) -> str:
    def s(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    return (
        f"{row['query']} {row['target']} {_mode(row):>14} {row['rate']:>7.0f}/s: batch p50 {s(row['batch_p50'])} "
        f"p99 {s(row['batch_p99'])} s, e2e p50 {s(row['e2e_p50'])} p99 {s(row['e2e_p99'])} s, backlog "
        f"{row['backlog_files']} files, {'sustained' if row['sustained'] else 'NOT sustained'}"
    )


PHASES = (
    "compute_s",
    "state_read_s",
    "state_apply_s",
    "sink_s",
    "commit_inline_s",
    "ack_wait_s",
    "outside_foreach_batch_s",
    "commit_background_s",
)


PREFETCH_COLUMNS = (*PREFETCH_COUNTS, "slack_s_mean", "slack_s_min", "not_ahead")


def _count(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:.3f}"


def markdown(rows: list[dict], capacity: bool) -> str:
    """The runs as Markdown: figures per run, the runtime's phases, and each mode's capacity if searched."""
    head = (
        "| query | target | mode | rate | batches | batch p50 (s) | batch p99 (s) | e2e p50 (s) | e2e p99 (s) | "
        "backlog (files) | sustained | max state keys | max Spark state rows |"
    )
    lines = [head, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]

    def s(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    for r in rows:
        lines.append(
            f"| {r['query']} | {r['target']} | {_mode(r)} | {r['rate']:.0f} | {r['batches']} | "
            f"{s(r['batch_p50'])} | {s(r['batch_p99'])} | {s(r['e2e_p50'])} | {s(r['e2e_p99'])} | "
            f"{r['backlog_files']} | {'yes' if r['sustained'] else 'no'} | "
            f"{r['state_keys'] or 'n/a'} | {r.get('spark_state_rows') or 'n/a'} |"
        )
    lines += [
        "",
        "Mean per-batch phases of the runtime's modes (s):",
        "",
        "| query | target | mode | rate | " + " | ".join(p.removesuffix("_s") for p in PHASES) + " |",
        "|" + " --- |" * 4 + " ---: |" * len(PHASES),
    ]
    for r in rows:
        if r["phases"]:
            cells = " | ".join("-" if r["phases"].get(p) is None else f"{r['phases'][p]:.3f}" for p in PHASES)
            lines.append(f"| {r['query']} | {r['target']} | {_mode(r)} | {r['rate']:.0f} | {cells} |")
    prefetching = [r for r in rows if r.get("prefetch")]
    if prefetching:
        lines += [
            "",
            "Prefetching, mean per batch (slack: hint to read, s; not ahead: batches whose hints were not extracted "
            "between batches):",
            "",
            "| query | target | mode | rate | " + " | ".join(PREFETCH_COLUMNS) + " |",
            "|" + " --- |" * 4 + " ---: |" * len(PREFETCH_COLUMNS),
        ]
        for r in prefetching:
            cells = " | ".join(_count(r["prefetch"].get(c)) for c in PREFETCH_COLUMNS)
            lines.append(f"| {r['query']} | {r['target']} | {_mode(r)} | {r['rate']:.0f} | {cells} |")
    if capacity:
        best: dict[tuple, float] = {}
        for r in rows:
            key = (r["query"], r["target"], _mode(r))
            if r["sustained"]:
                best[key] = max(best.get(key, 0.0), r["rate"])
            else:
                best.setdefault(key, 0.0)
        lines += ["", "| query | target | mode | highest sustained rate (records/s) |", "| --- | --- | --- | ---: |"]
        lines += [f"| {q} | {t} | {m} | {rate:.0f} |" for (q, t, m), rate in best.items()]
    return "\n".join(lines)
