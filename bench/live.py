"""``misa bench live``: every mode against a live source at a fixed rate, with a real processing-time trigger.

Per query and rate, one input of one-second files is generated once. For each mode, the job runs as
its own ``spark-submit --trigger 3s`` on an empty input folder, with Spark's checkpoint and the
durable state on the target (local disk or a mounted remote DFS; the jobs' output only with
``--output-on-target``, else in the run's local work folder); once Spark has started the
query, a feeder copies the files into the input folder in wall-clock time (temporary dot name,
then a rename), one per second. A mode whose batch takes longer than the trigger falls behind: its
next batch grows and the latency runs away, which is what this measures (:mod:`live_stats`):
batch latency p50/p99 and end-to-end latency per record (file arrival to the end of the batch that
read it; files never read count until the run stopped), the first ``--warmup`` batches and their files
left out of both, the backlog when the feed stops, and with
``--find-capacity`` the highest rate each mode sustains (the rate stepped up by ``--step`` until
the batch p99 exceeds the trigger or the backlog at the feed's stop exceeds two triggers' files: one
batch running and one trigger's arrivals).

Regimes (:mod:`bench.regimes`, set up before the runs and torn down after them): ``--dfs-delay``
puts Spark's checkpoint and the durable state on a remote DFS with that one-way delay; ``--state-volume``
puts the working state and Spark's local dir (so Spark's RocksDB working directory) on a throttled volume,
the runtime reading with direct reads and its caches and memtables scaled down to ``--volume-cache``;
``--redis-delay`` puts YSB's Redis behind a latency proxy, for every mode. Beside each run: the state's
keys, its SST bytes and, on the volume, the device's reads per batch.

Each run keeps its output, and once every run is done each runtime mode's output is checked against a native run
of the same query and rate (``native``, else ``native-default``; on the same target, else on another where it ended
every batch: a DFS too slow for Spark's store leaves its run there unfinished; :mod:`bench.same_output`). A
processing-time trigger cuts the input by the clock, so the runs' batches differ and what is compared is what does
not depend on the cut: the last row per key (update output), every row (a join's append output), or an append-mode
aggregation's windows up to the last window both runs closed. Only runs that ended the batch of every file they were
fed can be compared; a run without such a native run at its rate (``--find-capacity`` steps misa past native's
rates) is "not checked", and the table says so. A run whose output differs shows "outputs differ" instead of its
rate in the capacity table, the difference is printed and the command exits with
:data:`~bench.same_output.DIFFER_EXIT`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from bench.live_stats import (
    Arrival,
    after_kill,
    backlog_at,
    batch_ends,
    batch_latency,
    end_to_end,
    file_batches,
    weighted_percentile,
)
from bench.processes import kill_executor
from bench.regimes import DEFAULT_TOOLS, DiskSampler, RedisProxy, Regimes, RemoteDfs, SlowVolume
from bench.runs import DIFFERS, SAME, submit_command, submit_env
from bench.same_output import Check, compare_settled, differ_exit, settled_keys
from bench.workloads import (
    QUERIES,
    WORKLOADS,
    Environment,
    RedisSide,
    VolumeCaches,
    generator,
    input_name,
)
from common.location import local_location
from jobs.submit import MODES, NATIVE_MODES, RUNTIME_MODES
from jobs.ysb import REDIS_URL_ENV
from misa.cli.main import name_list
from misa.config_forms import parse_bytes, parse_seconds
from misa.obs.records import PREFETCH_COUNTERS
from misa.obs.report import load_metrics
from misa.runtime.spark_mirror import LOCAL_COPY
from misa.units import human_bytes
from services.redis_server import RedisServer


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
    folder: Path  # the run's folder on the target: Spark's checkpoint, durable state (output: --output-on-target)
    work: Path  # the run's local folder: input folder, local state, metrics, log
    local: Path  # the runtime's working state and Spark's local dir (on the state volume in that regime)
    arrivals: list[Arrival] = field(default_factory=list)
    feed_stopped: float = 0.0
    stopped: float = 0.0
    executor_killed: float | None = None  # when an executor JVM was SIGKILLed (--kill-executor-at)
    disk: DiskSampler | None = None  # the state volume's reads, sampled during the run

    @property
    def spark_log(self) -> Path:
        """Where Spark writes its checkpoint: the runtime's local copy of it when there is one (it mirrors that
        to the checkpoint location, a batch behind), else the checkpoint location."""
        local_copy = self.local / "state" / LOCAL_COPY
        return local_copy if (local_copy / "metadata").exists() else self.folder / "checkpoint"

    def result(self, trigger_s: float, warmup: int) -> dict:
        """The run's figures (see the module docstring)."""
        metrics = self.work / "metrics.jsonl"
        batch_of, ends = file_batches(self.spark_log), batch_ends(metrics)
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
            # files whose batch had not ended when the run stopped (planned is not run): the output lacks their rows
            "unfinished_files": sum(1 for a in self.arrivals if batch_of.get(a.name) not in ends),
            "device_reads_per_batch": self.device_reads_per_batch(warmup),
        }
        if self.executor_killed is not None:
            row["executor_killed_at_s"] = self.executor_killed - self.arrivals[0].at if self.arrivals else None
            row.update(after_kill(metrics, self.executor_killed))
        # held: batches within the trigger, and no more waiting than one batch running and one trigger's arrivals
        row["sustained"] = bool(
            row["batch_p99"] is not None and row["batch_p99"] <= trigger_s and files <= 2 * trigger_s + 1
        )
        return row

    def device_reads_per_batch(self, warmup: int) -> float | None:
        """Mean reads the state volume's device completed during each measured batch (None off the volume)."""
        metrics = self.work / "metrics.jsonl"
        if self.disk is None or not metrics.exists():
            return None
        kept = [r for r in load_metrics(metrics)[0] if r["batch_id"] >= warmup]
        if not kept:
            return None
        reads = [self.disk.reads_between(r["started"], r["started"] + r["latency_s"]) for r in kept]
        return sum(reads) / len(reads)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("live", help="every mode against a live source at a fixed rate, 3 s trigger")
    p.add_argument("--queries", type=lambda t: name_list(t, QUERIES), default=["cm2"], help=",".join(QUERIES))
    p.add_argument(
        "--modes", type=lambda t: name_list(t, MODES), default=["misa", "sync", "nocommit", "native", "native-default"]
    )
    p.add_argument("--rates", type=lambda t: [float(r) for r in t.split(",")], default=[1500.0, 2500.0])
    p.add_argument("--seconds", type=int, default=90, help="seconds of input fed per run")
    p.add_argument("--trigger", default="3s")
    p.add_argument("--warmup", type=int, default=3, help="first batches left out of the batch latency")
    p.add_argument("--jobs", type=int, default=50_000, help="CM job ids (CM2 state grows with them)")
    p.add_argument("--ysb-ads", type=int, default=1000, help="YSB ads over 100 campaigns (its lookup state)")
    p.add_argument(
        "--q20-in-flight", type=int, default=100, help="Q20: a bid names one of this many most recent auctions"
    )
    p.add_argument("--watermark-delay", help="the jobs' allowed lateness (default theirs: 10s); state grows with it")
    p.add_argument(
        "--output-mode",
        choices=("update", "append"),
        help="the jobs' output mode where they offer a choice (CM, YSB, LR4; default theirs: update)",
    )
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="where Spark's checkpoint and the durable state go, repeatable (default local=WORK/local)",
    )
    p.add_argument(
        "--kill-executor-at",
        type=float,
        metavar="SECONDS",
        help="SIGKILL one executor JVM this long after the input starts (a local-cluster --master); the table then "
        "gives each run's batches in the minute after the kill",
    )
    p.add_argument(
        "--reference-target",
        metavar="NAME=DIR",
        help="also run Spark's tuned store (native) there, per query and rate, as the output reference for targets "
        "where its runs do not end every batch (a slow DFS)",
    )
    p.add_argument(
        "--output-on-target",
        action="store_true",
        help="write the jobs' output to the target too (default: the local work folder; on a remote DFS each "
        "batch's output write is a synchronous cost no commit mode can hide)",
    )
    p.add_argument("--find-capacity", action="store_true", help="step each mode's rate up until it no longer holds")
    p.add_argument("--step", type=float, default=1.25, help="rate factor per capacity step")
    p.add_argument("--max-rate", type=float, default=40_000)
    p.add_argument("--work", type=Path, default=Path("bench-out/live"))
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.add_argument(
        "--master",
        default="local[2]",
        help="every run's master: local-cluster[2,2,1024] for executor processes (the state on the executors)",
    )
    p.add_argument(
        "--variant",
        type=Variant.parse,
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="run every mode once per variant, with its settings added; repeatable (e.g. prefetch on and off)",
    )
    add_regime_arguments(p)
    p.set_defaults(func=run)


def add_regime_arguments(p: argparse.ArgumentParser) -> None:
    """The regimes' flags (see :mod:`bench.regimes`)."""
    g = p.add_argument_group("regimes (set up, recorded and torn down by the bench; the tools need root)")
    g.add_argument("--tools", type=Path, default=DEFAULT_TOOLS, help="remote-dfs, slow-volume, latency-proxy")
    g.add_argument("--dfs-delay", type=_duration, help="remote DFS with this one-way delay (10ms: 20 ms RTT)")
    g.add_argument("--dfs-rate", default="400mbit", help="the remote DFS's bandwidth")
    g.add_argument("--dfs-mount", type=Path, default=Path("/mnt/misa-dfs"))
    g.add_argument("--state-volume", action="store_true", help="working state and Spark's local dir on slow-volume")
    g.add_argument("--volume-mount", type=Path, default=Path("/mnt/misa-slow-volume"))
    g.add_argument("--volume-read-iops", type=int, default=3000)
    g.add_argument("--volume-write-iops", type=int, default=3000)
    g.add_argument("--volume-bps", type=_size, default="125m", help="read and write bytes/s each (125m)")
    g.add_argument(
        "--volume-cache",
        type=_size,
        default="1m",
        help="on the volume: block cache and state cache each, memtables scaled to about as much (keep the sum "
        "under 1/20 of the state's SST bytes)",
    )
    g.add_argument("--redis-delay", type=_duration, help="YSB's Redis behind latency-proxy, this one-way delay")


def _duration(text: str) -> str:
    try:
        parse_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _size(text: str) -> str:
    try:
        parse_bytes(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 256k, 1m or 125m") from None
    return text


def run(args: argparse.Namespace) -> int:
    args.work.mkdir(parents=True, exist_ok=True)
    trigger_s = float(args.trigger.rstrip("s"))
    out = args.work / "live.jsonl"
    rows: list[dict] = []
    with Regimes() as regimes:
        env = environment(args, regimes)
        for note in env.notes:
            print(note, flush=True)
        runs = itertools.product(args.queries, env.targets.items(), args.modes, args.variant or [Variant()])
        for query, (target, folder), mode, variant in [*_applicable(runs), *_reference_runs(args)]:
            rates = list(args.rates)
            for rate in rates:  # with --find-capacity, the next rate is appended while the last one held
                row = _measure(args, env, query, mode, variant, rate, target, Path(folder), trigger_s)
                rows.append(row)
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(_line(row), flush=True)
                if args.find_capacity and rate == rates[-1] and row["sustained"] and rate * args.step <= args.max_rate:
                    rates.append(round(rate * args.step))
    checks = check_outputs(rows)
    table = markdown(rows, args.find_capacity, env.notes)
    (args.work / "live.md").write_text(table + "\n")
    (args.work / "summary.json").write_text(json.dumps({"regimes": env.regimes, "runs": rows}, indent=1))
    print("\n" + table)
    return differ_exit(checks)


AGGREGATIONS = ("cm1", "cm2", "lr4", "ysb")  # the live queries that are windowed aggregations (the rest: joins)


def check_outputs(rows: list[dict]) -> dict[str, Check]:
    """Each runtime mode's run against the native run (``native``, else ``native-default``) of the same query and
    rate, on the same target else another (:func:`_references`), when both ended the batch of every file fed: its
    row's ``output`` says the result (:data:`SAME`, :data:`DIFFERS` or why it was not checked); the checks by run."""
    checks = {}
    for row in rows:
        if row["mode"] in NATIVE_MODES:
            continue
        peers = _references(row, rows)
        if not peers:
            row["output"] = "not checked: no native run at this rate"
            continue
        unread = [
            f"{r['mode']} stopped before the batches of {r['unfinished_files']} files ended"
            for r in (row, peers[0])
            if r["unfinished_files"]
        ]
        if unread:
            row["output"] = "not checked: " + ", ".join(unread)
            continue
        keys = settled_keys(row["query"], row.get("output_mode"))
        closed = keys is None and row["query"] in AGGREGATIONS
        check = compare_settled(row["output_dir"], peers[0]["output_dir"], keys, windows_closed=closed)
        row["output"] = SAME if check.same else DIFFERS
        checks[f"{row['query']} {row['target']} {_mode(row)} {row['rate']:.0f}/s"] = check
        against = f"against {peers[0]['mode']} on {peers[0]['target']}"
        print(f"{row['query']} {row['target']} {_mode(row)} {row['rate']:.0f}/s {against}: {check.line()}", flush=True)
    return checks


def _references(row: dict, rows: list[dict]) -> list[dict]:
    """The native runs of ``row``'s query and rate, best reference first: one that ended every file's batch before
    one that did not, on ``row``'s target before another (the output does not depend on where the checkpoint is;
    on a slow DFS Spark's store may not finish, and its run on local disk is then the reference)."""
    same = [r for r in rows if r["mode"] in NATIVE_MODES and r["query"] == row["query"] and r["rate"] == row["rate"]]
    return sorted(
        same,
        key=lambda r: (bool(r["unfinished_files"]), r["target"] != row["target"], NATIVE_MODES.index(r["mode"])),
    )


def _applicable(runs: Iterable[tuple[str, tuple[str, str], str, Variant]]) -> Iterator[tuple]:
    """The runs, a native mode once per query and target when the variants set only misa's settings (Spark's own
    store reads none of them: one run stands for all, under no variant's name)."""
    seen = set()
    for query, target, mode, variant in runs:
        if mode in NATIVE_MODES and variant.conf and all(c.startswith("spark.misa.") for c in variant.conf):
            if (query, target, mode) in seen:
                continue
            seen.add((query, target, mode))
            variant = Variant()
        yield query, target, mode, variant


def _reference_runs(args: argparse.Namespace) -> list[tuple]:
    """``--reference-target``: Spark's tuned store once per query on that target too, the output reference where
    the measured targets are too slow for Spark to end its batches."""
    if not args.reference_target:
        return []
    name, folder = args.reference_target.split("=", 1)
    target = (name, str(Path(folder).expanduser().resolve()))
    return [(query, target, "native", Variant()) for query in args.queries]


def environment(args: argparse.Namespace, regimes: Regimes) -> Environment:
    """Set the regimes of the command line up (torn down with ``regimes``); where the runs go and what they add."""
    targets = dict(t.split("=", 1) for t in args.target)
    env = Environment(targets)
    if args.dfs_delay:
        dfs = regimes.enter("dfs", RemoteDfs(args.tools, args.dfs_delay, args.dfs_rate, args.dfs_mount))
        targets[f"dfs-{dfs.record()['rtt_ms']:g}ms"] = str(args.dfs_mount / "bench-live")
        env.notes.append(dfs.describe() + "; Spark's checkpoint and the durable state there, every mode")
    if not targets:
        targets["local"] = str(args.work / "local")
    for name, folder in targets.items():  # absolute: the job's DFS URL is file://<folder>/...
        targets[name] = str(Path(folder).expanduser().resolve())
    if args.state_volume:
        env.volume = regimes.enter("state_volume", SlowVolume(args.tools, args.volume_mount, args.volume_read_iops,
                                   args.volume_write_iops, args.volume_bps))  # fmt: skip
        env.caches = VolumeCaches.of(parse_bytes(args.volume_cache), args.conf)
        env.notes.append(
            env.volume.describe() + f"; the working state and Spark's local dir there; the runtime reads with "
            f"direct reads, block cache and state cache {human_bytes(env.caches.cache)} each, memtables scaled "
            f"down to {human_bytes(env.caches.write_buffer)} x {env.caches.shards} shards x 2 "
            f"({human_bytes(env.caches.total)} in memory in all); Spark's store keeps the page cache"
        )
    if "ysb" in args.queries:
        env.redis = _redis(args, regimes)
        if args.redis_delay:
            env.notes.append(regimes.entered["redis"].describe() + "; YSB's campaign lookups, every mode")
    env.regimes = regimes.record()
    if env.caches:
        env.regimes["state_volume"].update(cache_bytes=env.caches.cache, memory_bytes=env.caches.total)
    return env


def _redis(args: argparse.Namespace, regimes: Regimes) -> RedisSide:
    """A private Redis for YSB, behind ``latency-proxy`` with ``--redis-delay``."""
    server = regimes.hold(RedisServer())
    if not args.redis_delay:
        return RedisSide(server, server.url)
    proxy = regimes.enter("redis", RedisProxy(args.tools, args.redis_delay, server.port))
    return RedisSide(server, server.url.replace(f":{server.port}/", f":{proxy.listen_port}/"))


def _measure(
    args: argparse.Namespace,
    env: Environment,
    query: str,
    mode: str,
    variant: Variant,
    rate: float,
    target: str,
    folder: Path,
    trigger_s: float,
) -> dict:
    name = "-".join(filter(None, (query, mode, variant.name, str(int(rate)))))
    work = args.work / "runs" / f"{target}-{name}"
    local = env.volume.mount / "bench-live" / f"{target}-{name}" if env.volume else work
    live = LiveRun(query, mode, variant.name, rate, target, folder / name, work, local)
    for stale in (live.folder, live.work, local):
        shutil.rmtree(stale, ignore_errors=True)
    live.work.mkdir(parents=True)
    files = _input(args, env, query, rate)
    feed = live.work / "input"
    feed.mkdir()
    command, job_env = job_command(args, env, live, feed, local, variant.conf)
    log = (live.work / "run.log").open("w")
    process = subprocess.Popen(command, env=job_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stop_sampling = _sample_disk(live, env)
    try:
        _wait_started(live.folder / "checkpoint", process)
        if args.kill_executor_at is not None:
            _kill_executor_later(live, process, args.kill_executor_at)
        _feed(files, feed, live)
        live.feed_stopped = time.time()
        _drain(live, files, 3 * trigger_s, process)
    finally:
        live.stopped = time.time()
        _stop(process)
        stop_sampling()
        log.close()
    row = live.result(trigger_s, args.warmup)
    row["regimes"] = env.regimes
    row["output_mode"] = args.output_mode  # None: the job's own
    row["output_dir"] = str((live.folder if args.output_on_target else live.work) / "output")
    if env.volume:  # the next run needs the room
        shutil.rmtree(local, ignore_errors=True)
    return row


def _kill_executor_later(live: LiveRun, process: subprocess.Popen, after_s: float) -> None:
    """SIGKILL an executor JVM of the run's local cluster ``after_s`` seconds from now (the newest; with the state on
    the executors, each executor runs a state host), on a thread; its time goes to ``live``."""

    def kill() -> None:
        time.sleep(after_s)
        if process.poll() is None:
            live.executor_killed = kill_executor(process)

    threading.Thread(target=kill, name="bench-kill-executor", daemon=True).start()


def _sample_disk(live: LiveRun, env: Environment) -> Callable[[], None]:
    """On the state volume, sample its device's reads until the returned function is called."""
    if env.volume is None:
        return lambda: None
    live.disk = DiskSampler(env.volume.device)
    done = threading.Event()

    def sample() -> None:
        while True:
            live.disk.sample()
            if done.wait(live.disk.interval_s):
                live.disk.sample()
                return

    thread = threading.Thread(target=sample, name="disk-sampler", daemon=True)
    thread.start()
    return lambda: (done.set(), thread.join())


def _input(args: argparse.Namespace, env: Environment, query: str, rate: float) -> list[Path]:
    """The query's input at ``rate``: one file per second, generated once per workload, size and rate (YSB's
    campaigns then loaded into the bench's Redis)."""
    workload = WORKLOADS[QUERIES[query]]
    folder = args.work / "inputs" / input_name(workload, args, rate)
    if not folder.exists():
        staging = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        generator(workload, args)(staging, rate, args.seconds)
        staging.rename(folder)
    if workload == "ysb" and env.redis:
        env.redis.load(folder)
    return sorted(folder.glob("part-*.json"))


def job_command(
    args: argparse.Namespace, env: Environment, live: LiveRun, feed: Path, local: Path, conf: tuple[str, ...]
) -> tuple[list[str], dict[str, str]]:
    """The run's spark-submit command line and environment: ``local`` holds the runtime's working state and
    Spark's local dir (the state volume's folder of the run, else the run's work folder)."""
    job_args = ["--query", live.query, "--mode", live.mode, "--input", str(feed), "--output",
                str((live.folder if args.output_on_target else live.work) / "output"), "--checkpoint",
                str(live.folder / "checkpoint"), "--trigger", args.trigger,
                "--metrics", str(live.work / "metrics.jsonl")]  # fmt: skip
    if args.watermark_delay:
        job_args += ["--watermark-delay", args.watermark_delay]
    if args.output_mode:
        job_args += ["--output-mode", args.output_mode]
    if live.mode in RUNTIME_MODES:
        job_args += ["--state-dir", str(local / "state"), "--dfs", local_location(live.folder / "misa-state").url]
    elif live.query == "ysb":
        job_args += ["--native-stream"]  # the reference as a stream, its lookups in the bench's Redis too
    regime_conf = [*env.conf(), f"spark.local.dir={local / 'spark-local'}"] if env.volume else []
    job_env = submit_env()
    if env.redis:
        job_env[REDIS_URL_ENV] = env.redis.url  # not on the command line: it holds the password
    return submit_command(QUERIES[live.query], job_args, [*regime_conf, *args.conf, *conf], args.master), job_env


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
        done = file_batches(live.spark_log)
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
        + (
            f"; the minute after the executor kill: {row['kill_batches']} batches, p99 {s(row['kill_batch_p99'])} s"
            if "kill_batches" in row
            else ""
        )
    )


COMMIT_COLUMNS = (
    "upload_requests",
    "retention_requests",
    "log_requests",
    "bytes_uploaded",
    "upload_s",
    "log_mirror_s",
    "ack1_p50",
    "ack2_p50",
    "ack2_p99",
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


PREFETCH_COLUMNS = (*PREFETCH_COUNTERS, "slack_s_mean", "slack_s_min", "not_ahead")


def _count(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:.3f}"


def _memory_bytes(row: dict) -> int:
    """The runtime's caches and memtables on the state volume (0 off it)."""
    return int((row.get("regimes") or {}).get("state_volume", {}).get("memory_bytes") or 0)


def markdown(rows: list[dict], capacity: bool, notes: Sequence[str] = ()) -> str:
    """The runs as Markdown: the regimes (``notes``), figures per run with the state's size and the device's
    reads, the runtime's phases, and each mode's capacity if searched."""
    head = (
        "| query | target | mode | rate | batches | batch p50 (s) | batch p99 (s) | e2e p50 (s) | e2e p99 (s) | "
        "backlog (files) | sustained | max state keys | max Spark state rows | max SST bytes | device reads/batch | "
        "output |"
    )
    lines = [f"Regime: {note}." for note in notes] + [""] * bool(notes)
    lines += [head, "| --- | --- | --- |" + " ---: |" * 7 + " --- |" + " ---: |" * 4 + " --- |"]

    def s(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    for r in rows:
        lines.append(
            f"| {r['query']} | {r['target']} | {_mode(r)} | {r['rate']:.0f} | {r['batches']} | "
            f"{s(r['batch_p50'])} | {s(r['batch_p99'])} | {s(r['e2e_p50'])} | {s(r['e2e_p99'])} | "
            f"{r['backlog_files']} | {'yes' if r['sustained'] else 'no'} | "
            f"{_count(r['state_keys']) if r['state_keys'] else 'n/a'} | "
            f"{_count(r['spark_state_rows']) if r.get('spark_state_rows') else 'n/a'} | "
            f"{human_bytes(r['sst_bytes']) if r.get('sst_bytes') else 'n/a'} | "
            f"{_count(r['device_reads_per_batch']) if r.get('device_reads_per_batch') is not None else 'n/a'} | "
            f"{r.get('output', '-')} |"
        )
    killed = [r for r in rows if "kill_batches" in r]
    if killed:
        lines += ["", "The minute after an executor JVM was SIGKILLed (batches that started in it):", ""]
        lines += ["| query | target | mode | rate | killed at (s) | batches | batch p99 (s) | largest batch (s) |"]
        lines += ["| --- | --- | --- | --- |" + " ---: |" * 4]
        for r in killed:
            lines.append(
                f"| {r['query']} | {r['target']} | {_mode(r)} | {r['rate']:.0f} | {s(r['executor_killed_at_s'])} | "
                f"{r['kill_batches']} | {s(r['kill_batch_p99'])} | {s(r['kill_batch_max'])} |"
            )
    small = [r for r in rows if r.get("sst_bytes") and r["sst_bytes"] < 20 * _memory_bytes(r)]
    if small:
        runs = ", ".join(f"{r['query']} {_mode(r)} {r['rate']:.0f}/s" for r in small)
        lines += ["", f"Warning: the state's SST bytes are under 20x the runtime's caches and memtables in {runs}."]
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
    committing = [r for r in rows if r.get("commit")]
    if committing:
        lines += [
            "",
            "The commit, mean per version (requests: calls to the DFS client; ack times from the hand-over, s):",
            "",
            "| query | target | mode | rate | " + " | ".join(c.replace("_", " ") for c in COMMIT_COLUMNS) + " |",
            "|" + " --- |" * 4 + " ---: |" * len(COMMIT_COLUMNS),
        ]
        for r in committing:
            cells = " | ".join(
                human_bytes(r["commit"][c]) if c.startswith("bytes") else _count(r["commit"][c]) for c in COMMIT_COLUMNS
            )
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
        differ = {(r["query"], r["target"], _mode(r)) for r in rows if r.get("output") == DIFFERS}
        for r in rows:
            key = (r["query"], r["target"], _mode(r))
            if r["sustained"]:
                best[key] = max(best.get(key, 0.0), r["rate"])
            else:
                best.setdefault(key, 0.0)
        lines += ["", "| query | target | mode | highest sustained rate (records/s) |", "| --- | --- | --- | ---: |"]
        lines += [
            f"| {q} | {t} | {m} | {'outputs differ: no rate reported' if (q, t, m) in differ else f'{rate:.0f}'} |"
            for (q, t, m), rate in best.items()
        ]
    return "\n".join(lines)
