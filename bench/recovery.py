"""``misa bench recovery``: the time from a SIGKILL of the driver to the first batch completed after the restart,
or (case ``executor``) from a SIGKILL of an executor JVM to the first batch completed after it.

The workload is NEXMark Q18 (the last bid of each (bidder, auction)): its state has one key per
distinct (bidder, auction) pair both on the runtime and in Spark's RocksDB state store (no windows,
nothing expires), so ``--build-events`` sets the state size alike in every mode (the default 3.5M
events hold about 1.03M pairs; the run counts them in the input and reports them).

Per target (where Spark's checkpoint and the runtime's durable state go: a local folder, or the
remote DFS mount) and mode (``misa``, ``native``: Spark's store tuned as its documentation
advises, see :func:`jobs.submit.native_state_store_conf`), one job runs as its own spark-submit
with a processing-time trigger through :mod:`bench.recovery_probe`, which timestamps its start.
It reads the build input (files of ``--batch-events`` events, ``--files-per-batch`` per batch)
until the state holds every build key, then stays idle. Then, per cycle (``--repeats`` times each
of ``--cases``), each mode in turn (the order alternates between cycles, so that both meet the
same load on a shared machine): once its last batch is durable (the runtime's DFS commit marker,
Spark's commit log entry) and the query has been idle for ``--settle`` seconds, the job's process
group is killed with SIGKILL, one new file of ``--batch-events`` events is added to the input, and
the same command starts again. Case ``same`` keeps the machine's local directories; case ``new``
moves the runtime's local state and ``spark.local.dir`` (where Spark's RocksDB store works) away
first, as on a new machine: only the target is left.

The recovery time runs from the kill to the end of the first batch after the restart (Spark's
trigger start plus its ``triggerExecution``, from the metrics). It is split at the restarted
process's timestamps: restart (kill to the new spark-submit: the old processes gone, the
directories moved), JVM (to the Python driver's start), session (Python imports and the Spark
session), recovery (the runtime's claim of the state, its reconcile, the restore of the version
from the local copy or the DFS, and opening RocksDB), query start (the job's setup and Spark's
start of the query up to the first trigger) and the first batch (Spark's store loads its state
inside it: ``state load`` is Spark's ``rocksdbLoadLatencyMs``, summed over the state partitions,
which run two at a time on two cores). For reference, a second new file then makes a warm batch of
the same size in the restarted process (``warm batch``): what the first batch costs beyond it is
the cold start of the query's first batch.

Case ``executor`` (``--master local-cluster[...]``) kills an executor JVM of the idle job instead (the one
running a state host, with ``spark.misa.state.placement=executors``), then adds the file. Spark reruns what the
lost executor ran and its standalone master starts a new executor; Spark's store loads the lost executor's state
partitions on another. misa finds the lost host when the batch asks it, and its partition alone moves to a new
host (Spark runs the host's task again) that loads the partition's newest durable version and redoes the batches
after it; the other host keeps its state and no batch fails. No process restarts, so the driver's phases are
empty; ``detect`` is the kill to the failover's start, ``hosts`` the failover, ``query start`` the rest up to the
first batch's trigger.

Both modes' output (Parquet per batch id, on the target) is kept, and once a target's cycles are done misa's is
checked against native's (:mod:`bench.same_output`): their batches differ (each restart re-plans), so as the
last row written per (bidder, auction), Q18's result. Where it differs, the target's rows show no misa / native
ratio, the difference is printed and the command exits with :data:`~bench.same_output.DIFFER_EXIT`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Collection, Iterator, Sequence

from bench.live import _stop
from bench.live_stats import batch_ends, file_batches
from bench.processes import kill, kill_executor
from bench.runs import ROOT, submit_command, submit_env
from bench.same_output import Check, compare_settled, differ_exit, settled_keys
from checkpoint.manifest import marker_path
from common.location import local_location
from jobs.gen.nexmark import generate_nexmark
from jobs.submit import RUNTIME_MODES
from misa.cli.main import name_list
from misa.obs.report import load_metrics
from misa.parallel.layout import partitions_file
from misa.runtime.spark_log import SparkCheckpointLog
from misa.state.store import EMPTY_VERSION

MODES = ("misa", "native")
CASES = ("same", "new", "executor")
RESTARTS_IN_PLACE = 100  # the runtime's job calls start() again after a failed batch (an executor lost) this often
PROBE = Path(__file__).resolve().with_name("recovery_probe.py")
JOB = ROOT / "jobs" / "nexmark.py"
PHASES = ("restart_s", "jvm_s", "session_s", "recovery_s", "query_start_s", "first_batch_s")
RECOVERY_STEPS = ("reconcile_s", "restore_s", "open_s")


@dataclass(frozen=True)
class Workload:
    """The input files, generated once: the build files and two new files per restart."""

    build: list[Path]
    extra: list[tuple[Path, Path]]  # per cycle: the first batch's file after the restart, then a warm batch's
    keys: int  # distinct (bidder, auction) pairs in the build files: the state's keys at the first kill


@dataclass
class Series:
    """One mode on one target: a job that is built up, then killed and restarted once per cycle."""

    mode: str
    target: str
    folder: Path  # on the target: Spark's checkpoint, the runtime's durable state, the output
    work: Path  # local: input, the runtime's working state, spark.local.dir, metrics, events, logs
    standbys: int = 0  # misa's spark.misa.state.standbyReplicas
    lives: int = 0  # processes started so far
    process: subprocess.Popen | None = None  # the job's current process
    last: int = -1  # the last batch it completed

    @property
    def name(self) -> str:
        """The series' name in the rows: its mode, and its standbys per partition when it has any."""
        return f"{self.mode}+{self.standbys} standby" if self.standbys else self.mode

    @property
    def checkpoint(self) -> Path:
        return self.folder / "checkpoint"

    @property
    def dfs(self) -> Path:
        return self.folder / "misa-state"

    @property
    def input(self) -> Path:
        return self.work / "input"

    @property
    def local_dirs(self) -> tuple[Path, Path]:
        """What a new machine lacks: the runtime's working state and ``spark.local.dir``."""
        return self.work / "state", self.work / "spark-local"

    @property
    def metrics(self) -> Path:
        return self.work / "metrics.jsonl"

    def events(self, life: int) -> Path:
        """The probe's events of the ``life``-th process (from 1)."""
        return self.work / f"events-{life}.jsonl"

    def durable(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` is committed where a restart on a new machine reads it: Spark's commit log at
        the checkpoint location (the runtime mirrors it there once Spark reports the batch) and, for the runtime,
        the state's DFS marker (of every key partition, when the state has them)."""
        if self.mode in RUNTIME_MODES and not all((root / marker_path(batch_id)).exists() for root in self.state_roots):
            return False
        return batch_id in SparkCheckpointLog(self.checkpoint).batch_ids("commits")

    @property
    def state_roots(self) -> list[Path]:
        """Where the runtime's DFS markers are: the state's folder, or each key partition's."""
        partitions = partitions_file(local_location(self.dfs).url) if self.dfs.exists() else None
        return [self.dfs] if partitions is None else [self.dfs / f"partition-{i}" for i in range(partitions)]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "recovery", help="time from a SIGKILL of the driver (or an executor) to the first batch after it"
    )
    p.add_argument("--modes", type=lambda t: name_list(t, MODES), default=list(MODES), help="misa,native")
    p.add_argument(
        "--cases",
        type=lambda t: name_list(t, CASES),
        default=["same", "new"],
        help="same,new (the driver killed, on the same or a new machine), executor (an executor JVM killed; needs a "
        "local-cluster --master)",
    )
    p.add_argument("--master", default="local[2]", help="Spark master of every job (executor: local-cluster[N,C,MB])")
    p.add_argument("--repeats", type=int, default=2, help="cycles per case, per mode and target")
    p.add_argument("--build-events", type=int, default=3_500_000, help="NEXMark events before the first kill")
    p.add_argument("--batch-events", type=int, default=7_500, help="events per input file (one file per restart)")
    p.add_argument("--files-per-batch", type=int, default=30, help="input files per batch while building the state")
    p.add_argument("--trigger", default="3s")
    p.add_argument("--settle", type=float, default=3.0, help="seconds idle after the last durable batch, then kill")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed for the build and for each restart")
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="where Spark's checkpoint and the durable state go, repeatable (default local=WORK/dfs)",
    )
    p.add_argument("--work", type=Path, default=Path("bench-out/recovery"))
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf")
    p.add_argument(
        "--standby-replicas",
        type=lambda t: [int(n) for n in t.split(",")],
        default=[0],
        help="misa's series, one per count of standbys per partition (spark.misa.state.standbyReplicas), side by "
        "side, e.g. 0,1 (with the state on the executors)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Every target in turn, its modes side by side; one row per cycle. The rows and the tables go to WORK."""
    if "executor" in args.cases and not args.master.startswith("local-cluster"):
        raise SystemExit(
            f"--cases executor kills an executor JVM: it needs a local-cluster --master, not {args.master}"
        )
    args.work = args.work.resolve()  # file:// URLs need absolute paths
    args.work.mkdir(parents=True, exist_ok=True)
    workload = prepare_input(args)
    print(f"input: {len(workload.build)} build files, {workload.keys:,} keys", flush=True)
    targets = dict(t.split("=", 1) for t in args.target) or {"local": str(args.work / "dfs")}
    rows: list[dict] = []
    checks: dict[str, Check] = {}
    for target, folder in targets.items():
        for row in run_target(args, workload, target, Path(folder).resolve()):
            rows.append(row)
            with (args.work / "recovery.jsonl").open("a") as out:
                out.write(json.dumps(row) + "\n")
            print(line(row), flush=True)
        if set(MODES) <= set(args.modes):
            for standbys in args.standby_replicas:
                name = f"{target}+{standbys} standby" if standbys else target
                checks[name] = check_output(Path(folder).resolve(), standbys)
                print(f"[{name}] {checks[name].line()}", flush=True)
    table = markdown(rows, {name.split("+")[0] for name, check in checks.items() if not check.same})
    (args.work / "recovery.md").write_text(table + "\n")
    print("\n" + table)
    return differ_exit(checks)


def check_output(folder: Path, standbys: int = 0) -> Check:
    """misa's output (with ``standbys`` per partition) on a target against native's, after every cycle: the last row
    written per Q18 key."""
    misa = folder / series_folder("misa", standbys) / "output"
    return compare_settled(misa, folder / "q18-native" / "output", settled_keys("q18"))


def series_folder(mode: str, standbys: int) -> str:
    """A series' folder name on its target (and locally)."""
    return f"q18-{mode}-standby{standbys}" if standbys else f"q18-{mode}"


# ---------------------------------------------------------------------------------------------- input
def prepare_input(args: argparse.Namespace) -> Workload:
    """The Q18 input, generated on first use: build files, then two files per cycle, and the build's keys."""
    cycles = 2 * args.repeats * len(args.cases)
    build_files = -(-args.build_events // args.batch_events)
    folder = args.work / "inputs" / f"nexmark-{args.batch_events}x{build_files}+{cycles}"
    if not folder.exists():
        staging = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        # one file per second of event time: Q18 has no windows, so the rate only spaces the event times
        generate_nexmark(staging, args.batch_events, build_files + cycles, seed=1, progress=False)
        files = sorted(staging.glob("part-*.json"))
        (staging / "keys.json").write_text(json.dumps({"keys": distinct_pairs(files[:build_files])}))
        staging.rename(folder)
    files = sorted(folder.glob("part-*.json"))
    keys = json.loads((folder / "keys.json").read_text())["keys"]
    extra = files[build_files:]
    return Workload(files[:build_files], list(zip(extra[::2], extra[1::2])), keys)


def distinct_pairs(files: Sequence[Path]) -> int:
    """Distinct (bidder, auction) pairs of the bids in ``files``: Q18's state keys after reading them."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.json as pj

    pairs: set[tuple[int, int]] = set()
    for f in files:
        bid = pj.read_json(f).column("bid").combine_chunks()
        bid = pc.filter(bid, pc.is_valid(bid))
        both = np.stack([pc.struct_field(bid, "bidder").to_numpy(), pc.struct_field(bid, "auction").to_numpy()], 1)
        pairs.update(map(tuple, both.tolist()))
    return len(pairs)


def add_files(files: Sequence[Path], folder: Path) -> None:
    """Put ``files`` into the input folder (hard links: the generator's modification times stay, in order)."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in files:
        try:
            os.link(f, folder / f.name)
        except OSError:
            shutil.copy2(f, folder / f.name)


# ---------------------------------------------------------------------------------------------- the cycles
def run_target(args: argparse.Namespace, workload: Workload, target: str, folder: Path) -> Iterator[dict]:
    """Build every mode's state (each job then stays idle), then the cycles with the modes interleaved: per
    repeat and case, each mode's job is killed and restarted in turn (the order alternates), so that the
    modes of a cycle meet the same load on a shared machine. Yields each cycle's row per mode."""
    jobs = [
        Series(m, target, folder / series_folder(m, n), args.work / "runs" / f"{target}-{series_folder(m, n)}", n)
        for m in args.modes
        for n in (args.standby_replicas if m in RUNTIME_MODES else [0])
    ]
    try:
        for series in jobs:
            build(args, workload, series)
        cycles = [(repeat, case) for repeat in range(1, args.repeats + 1) for case in args.cases]
        for index, ((repeat, case), files) in enumerate(zip(cycles, workload.extra)):
            for series in jobs if index % 2 == 0 else reversed(jobs):
                row = cycle(args, series, case, files)
                yield {"target": target, "mode": series.name, "case": case, "run": repeat, "keys": workload.keys, **row}
    finally:
        for series in jobs:
            if series.process is not None:
                _stop(series.process)
            shutil.rmtree(series.work / "trash", ignore_errors=True)


def build(args: argparse.Namespace, workload: Workload, series: Series) -> None:
    """Start the series' job on the build input and wait until it has read all of it, durably, and settled."""
    for stale in (series.folder, series.work):
        shutil.rmtree(stale, ignore_errors=True)
    series.work.mkdir(parents=True)
    add_files(workload.build, series.input)
    label = f"{series.target}/{series.name}"
    print(f"[{label}] building the state from {len(workload.build)} files ...", flush=True)
    started = time.monotonic()
    start(args, series)
    series.last = wait_read([f.name for f in workload.build], series, args.timeout)
    settle(series, series.last, args)
    print(f"[{label}] built in {time.monotonic() - started:.0f} s (batches 0..{series.last})", flush=True)


def start(args: argparse.Namespace, series: Series) -> None:
    """Start the series' job (its next life) through the probe, in its own process group."""
    series.lives += 1
    state_dir, spark_local = series.local_dirs
    job_args = ["--query", "q18", "--mode", series.mode, "--input", str(series.input),
                "--output", str(series.folder / "output"), "--checkpoint", str(series.checkpoint),
                "--trigger", args.trigger, "--max-files-per-trigger", str(args.files_per_batch),
                "--metrics", str(series.metrics)]  # fmt: skip
    if series.mode in RUNTIME_MODES:
        job_args += ["--state-dir", str(state_dir), "--dfs", local_location(series.dfs).url]
        if "executor" in args.cases:  # a failure the hosts' failover cannot mend restarts the query in place
            job_args += ["--retry-start", str(RESTARTS_IN_PLACE)]
    conf = [f"spark.local.dir={spark_local}", *args.conf]
    if series.standbys:
        conf.append(f"spark.misa.state.standbyReplicas={series.standbys}")
    command = submit_command(PROBE, [str(series.events(series.lives)), str(JOB), *job_args], conf, args.master)
    with (series.work / f"run-{series.lives}.log").open("w") as log:
        series.process = subprocess.Popen(
            command, env=submit_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def cycle(args: argparse.Namespace, series: Series, case: str, files: tuple[Path, Path]) -> dict:
    """Kill the idle job, add the first of ``files`` to its input, (``new``: move the local directories
    away,) restart it and wait until its first batch is durable and the job idle again; then time one
    warm batch of the second file in the same process, for reference. The cycle's figures."""
    first, warm = files
    assert series.process is not None
    if case == "executor":
        return cycle_executor(args, series, files)
    killed = kill(series.process)
    add_files([first], series.input)
    if case == "new":
        trash = series.work / "trash" / str(series.lives)
        trash.mkdir(parents=True)
        for folder in series.local_dirs:
            if folder.exists():
                folder.rename(trash / folder.name)
    spawned = time.time()
    start(args, series)
    batch_id = wait_read([first.name], series, args.timeout)
    settle(series, batch_id, args)
    shutil.rmtree(series.work / "trash", ignore_errors=True)
    record = first_batch_after(series.metrics, series.last)
    if record is None or record["batch_id"] != batch_id:
        raise RuntimeError(f"{series.target}/{series.name}: the first batch after the restart is not the new file's")
    events = probe_events(series.events(series.lives))
    row = {"batch_id": batch_id, **phases(killed, spawned, events, record)}
    return row | {"warm_batch_s": warm_batch(args, series, warm, batch_id)}


def cycle_executor(args: argparse.Namespace, series: Series, files: tuple[Path, Path]) -> dict:
    """Kill one executor JVM of the idle job's local cluster, add the first of ``files`` and wait until its batch
    is durable: Spark reruns the lost tasks (and the standalone master starts a new executor); with the state on
    the executors, misa's batch fails on the lost host and the job restarts its query in place. Then a warm batch
    of the second file."""
    first, warm = files
    assert series.process is not None
    logged = probe_events(series.events(series.lives))
    hosts = sorted([*logged.get("hosts", []), *logged.get("failover", [])], key=lambda e: e["end"])
    killed = kill_executor(series.process, hosts[-1]["pids"] if hosts else [])
    add_files([first], series.input)
    batch_id = wait_read([first.name], series, args.timeout)
    settle(series, batch_id, args)
    record = first_batch_after(series.metrics, series.last)
    if record is None or record["batch_id"] != batch_id:
        raise RuntimeError(f"{series.target}/{series.name}: the first batch after the kill is not the new file's")
    logged = probe_events(series.events(series.lives))
    events = {name: [e for e in es if e.get("start", e.get("at", 0)) >= killed] for name, es in logged.items()}
    row = {"batch_id": batch_id, **executor_phases(killed, events, record)}
    return row | {"warm_batch_s": warm_batch(args, series, warm, batch_id)}


def warm_batch(args: argparse.Namespace, series: Series, warm: Path, batch_id: int) -> float | None:
    """Add ``warm`` to the input and time its batch in the running process (the one after ``batch_id``)."""
    add_files([warm], series.input)
    series.last = wait_read([warm.name], series, args.timeout)
    settle(series, series.last, args)
    record = first_batch_after(series.metrics, batch_id)
    return record["latency_s"] if record else None


def wait_read(names: Sequence[str], series: Series, timeout_s: float) -> int:
    """Wait until the batches that read the files ``names`` have ended; the last of those batches.

    Spark's file source log is read when a batch has ended and at least once a second: the runtime mirrors it to the
    checkpoint location after the batch's end (and its metrics), so the last batch's entry can land later."""
    deadline, seen, recheck = time.monotonic() + timeout_s, -1, 0.0
    while True:
        ends = batch_ends(series.metrics)
        if len(ends) != seen or time.monotonic() >= recheck:
            seen, recheck = len(ends), time.monotonic() + 1.0
            read = file_batches(series.checkpoint)
            if all(n in read and read[n] in ends for n in names):
                return max(read[n] for n in names)
        check_running(series, deadline)
        time.sleep(0.05)


def settle(series: Series, batch_id: int, args: argparse.Namespace) -> None:
    """Wait until ``batch_id`` is durable, then ``--settle`` seconds more."""
    deadline = time.monotonic() + args.timeout
    while not series.durable(batch_id):
        check_running(series, deadline)
        time.sleep(0.05)
    time.sleep(args.settle)


def check_running(series: Series, deadline: float) -> None:
    """Raise, with the end of its log, when the job has ended or the deadline has passed."""
    process = series.process
    assert process is not None
    if process.poll() is None and time.monotonic() < deadline:
        return
    tail = (series.work / f"run-{series.lives}.log").read_text()[-3000:]
    what = f"ended (exit {process.returncode})" if process.returncode is not None else "timed out"
    raise RuntimeError(f"{series.target}/{series.name}: the job {what}:\n{tail}")


# ---------------------------------------------------------------------------------------------- figures
def first_batch_after(metrics: Path, last: int) -> dict | None:
    """The metrics record of the first batch after batch ``last``."""
    records, _ = load_metrics(metrics)
    return min((r for r in records if r["batch_id"] > last), key=lambda r: r["batch_id"], default=None)


def probe_events(path: Path) -> dict[str, list[dict]]:
    """The probe's events of one process, by name, in order."""
    events: dict[str, list[dict]] = {}
    for text in path.read_text().splitlines():
        event = json.loads(text)
        events.setdefault(event["event"], []).append(event)
    return events


def phases(killed: float, spawned: float, events: dict[str, list[dict]], record: dict) -> dict[str, Any]:
    """Where the time from ``killed`` to the end of the first batch (``record``) went, in seconds.

    The phases follow each other: restart, JVM, session, recovery (the runtime's reconcile, restore
    and RocksDB open; none in native mode), query start (the rest up to the first trigger), first batch.
    """
    python, session = events["python"][0]["at"], events["session"][0]["end"]
    trigger = record["started"]
    out: dict[str, Any] = {"restart_s": spawned - killed, "jvm_s": python - spawned, "session_s": session - python}
    out.update(recovery_steps(events))
    out["query_start_s"] = trigger - session - out["recovery_s"]
    out["first_batch_s"] = record["latency_s"]
    out["total_s"] = trigger + record["latency_s"] - killed
    out["state_load_sum_s"] = state_load(events, record["batch_id"])
    out["restored_from"] = events["restore"][-1]["source"] if "restore" in events else None
    out["state_keys"] = record.get("state_keys")
    return out


def executor_phases(killed: float, events: dict[str, list[dict]], record: dict) -> dict[str, Any]:
    """Where the time from an executor's kill (``killed``) to the end of the first batch after it went: the
    runtime's recovery in place (its events after the kill; none in native mode), the rest up to that batch's
    trigger (the trigger's wait, the failed attempt, the new state hosts, the query's restart: ``query_start_s``)
    and the batch itself. No process restarts: the driver's phases are None."""
    trigger = record["started"]
    out: dict[str, Any] = {"restart_s": None, "jvm_s": None, "session_s": None}
    out.update(recovery_steps(events))
    out.update(host_restart(killed, events))
    out["query_start_s"] = trigger - killed - out["recovery_s"]
    out["first_batch_s"] = record["latency_s"]
    out["total_s"] = trigger + record["latency_s"] - killed
    out["state_load_sum_s"] = state_load(events, record["batch_id"])
    out["restored_from"] = events["restore"][-1]["source"] if events.get("restore") else None
    out["state_keys"] = record.get("state_keys")
    return out


def host_restart(killed: float, events: dict[str, list[dict]]) -> dict[str, float | None]:
    """With the state on the executors: from the kill to the start of the new state host(s) (``detect_s``: the
    trigger's wait and finding the loss) and their start and catching up (``hosts_s``): a lost partition moved to
    a new host (``failover``), else every host started again; None without hosts."""
    moved = events.get("failover") or events.get("hosts")
    if not moved:
        return {"detect_s": None, "hosts_s": None}
    first, last = moved[0], moved[-1]
    return {"detect_s": first["start"] - killed, "hosts_s": last["end"] - first["start"]}


def recovery_steps(events: dict[str, list[dict]]) -> dict[str, float]:
    """The runtime's recovery, from its claim of the state (when it makes one) or its reconcile to the
    end of both: loading the version it chose (restore, then open RocksDB) and the rest (reconcile)."""
    if not events.get("reconcile"):
        return {"recovery_s": 0.0}
    reconcile = events["reconcile"][0]
    begin = min([reconcile["start"], *(e["start"] for e in events.get("claim", []))])
    load = next(e for e in events["load"] if e["version"] != EMPTY_VERSION and e["start"] >= reconcile["start"])
    end = max(reconcile["end"], load["end"])
    restore = sum(e["end"] - e["start"] for e in events.get("restore", []) if e["start"] >= load["start"])
    load_s = load["end"] - load["start"]
    return {
        "recovery_s": end - begin,
        "reconcile_s": end - begin - load_s,
        "restore_s": restore,
        "open_s": load_s - restore,
    }


def state_load(events: dict[str, list[dict]], batch_id: int) -> float | None:
    """Spark's state load time in batch ``batch_id`` (``rocksdbLoadLatencyMs``, summed over partitions), if any."""
    for event in events.get("progress", []):
        if event["batch_id"] == batch_id:
            operators = event["progress"].get("stateOperators") or []
            loads = [op.get("customMetrics", {}).get("rocksdbLoadLatencyMs") for op in operators]
            return sum(v for v in loads if v is not None) / 1000 if any(v is not None for v in loads) else None
    return None


def line(row: dict) -> str:
    """One cycle's result as a progress line."""
    split = ", ".join(f"{p.removesuffix('_s')} {row[p]:.2f}" for p in PHASES if row.get(p) is not None)
    return f"[{row['target']}/{row['mode']}] {row['case']} machine, run {row['run']}: {row['total_s']:.2f} s ({split})"


def cell_medians(rows: Sequence[dict]) -> dict[tuple[str, str, str], dict[str, float]]:
    """Median figures per (target, case, mode), with the runs and their smallest and largest total."""
    cells: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        cells.setdefault((r["target"], r["case"], r["mode"]), []).append(r)
    keys = ("total_s", *PHASES, *RECOVERY_STEPS, "state_load_sum_s", "warm_batch_s")
    out = {}
    for cell, rs in cells.items():
        totals = [r["total_s"] for r in rs]
        out[cell] = {k: median(r[k] for r in rs) for k in keys if all(r.get(k) is not None for r in rs)}
        out[cell] |= {"runs": len(rs), "min_s": min(totals), "max_s": max(totals)}
    return out


def paired_ratio(row: dict, rows: Sequence[dict]) -> float | None:
    """A runtime row's total over the native total of the same target, case and run (None for native rows)."""
    if row["mode"] == "native":
        return None
    same = ("target", "case", "run")
    native = [r for r in rows if r["mode"] == "native" and all(r[k] == row[k] for k in same)]
    return row["total_s"] / native[0]["total_s"] if native else None


def markdown(rows: Sequence[dict], differ: Collection[str] = ()) -> str:
    """The median per cell with the misa/native ratio of the medians, then every cycle with its phases; no ratio on
    the targets ``differ`` (where misa's output differs from native's)."""

    def s(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    medians = cell_medians(rows)
    lines = [
        "| target | machine | mode | runs | recovery (s) | min - max (s) | misa / native | JVM + session (s) "
        "| runtime recovery (s) | query start (s) | first batch (s) | Spark's state load (s, summed) "
        "| warm batch (s) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (target, case, mode), m in medians.items():
        native = medians.get((target, case, "native"), {}).get("total_s")
        ratio = s(m["total_s"] / native) if native and mode != "native" else "-"
        ratio = "outputs differ" if target in differ and mode != "native" else ratio
        lines.append(
            f"| {target} | {case} | {mode} | {m['runs']} | {s(m['total_s'])} | {s(m['min_s'])} - {s(m['max_s'])} "
            f"| {ratio} | {s(m['jvm_s'] + m['session_s'] if 'jvm_s' in m else None)} | {s(m['recovery_s'])} "
            f"| {s(m['query_start_s'])} | "
            f"{s(m['first_batch_s'])} | {s(m.get('state_load_sum_s'))} | {s(m.get('warm_batch_s'))} |"
        )
    lines += [
        "",
        "| target | machine | mode | run | keys | total (s) | misa / native | restart | JVM | session | reconcile "
        "| restore | open | query start | (failure seen) | (new hosts) | first batch | Spark's state load (summed) "
        "| warm batch | restored from |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        paired = "outputs differ" if r["target"] in differ and r["mode"] != "native" else s(paired_ratio(r, rows))
        cells = [s(r["total_s"]), paired]
        cells += [s(r.get(k)) for k in ("restart_s", "jvm_s", "session_s", *RECOVERY_STEPS)]
        cells += [s(r["query_start_s"]), s(r.get("detect_s")), s(r.get("hosts_s")), s(r["first_batch_s"])]
        cells += [s(r.get("state_load_sum_s")), s(r.get("warm_batch_s"))]
        lines.append(
            f"| {r['target']} | {r['case']} | {r['mode']} | {r['run']} | {r['keys']:,} | "
            + " | ".join(cells)
            + f" | {r.get('restored_from') or '-'} |"
        )
    return "\n".join(lines)
