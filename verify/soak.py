"""``misa soak``: a randomized crash soak of the jobs on the MiSA runtime, compared with plain Spark.

Each iteration draws a job (CM2, LR2 or NEXMark Q20), a commit mode, a DFS (``file://`` under the
run's folder, or a bucket on an S3 server on loopback, moto's, that the soak starts), the state's process
count (``spark.misa.state.processes``: 1, or 2 worker processes whose failpoints fire in the workers), the state's
placement (``spark.misa.state.placement``: ``driver`` on ``local[2]``, or ``executors`` in half the iterations: the
state hosts on the two executors of a ``local-cluster``, whose failpoints fire in the hosts) and a scenario:

* ``kill``: one or two SIGKILLs in a row, each at a random hit of a random failpoint
  (``MISA_FAILPOINTS``) or of the whole spark-submit process group after a random delay, or, in an
  iteration with state worker processes, of one worker after a random delay (the driver must fail the
  batch and exit on its own); with the state on the executors, also of an executor JVM at a random hit of a
  failpoint in its state host (``killexecutor``) or after a random delay: the lost host's partition moves to a new
  host and the run must finish (exit 0; a query that fails counts as a failure); then a run without kills that must
  finish.
* ``moved``: the same kills, but every run after a kill starts on "another machine": a new, empty
  local state dir (``--state-dir``), so it recovers from the DFS.
* ``damaged``: the same kills, then one byte of a random SST or meta file on the DFS flipped, or
  the file deleted; the local state stays, so the final run must give the exact result (and leave
  the DFS sound), or refuse with a message naming the damaged file and the fix.
* ``retry``: possibly a kill, then a run whose first ``start()`` fails at a raising failpoint and
  which calls ``start()`` again in the same driver (``--retry-start 1``): it must finish.
* ``standby``: two drivers of the query on the same checkpoint and DFS, each with its own state dir,
  the second started while the first runs (both slowed by a ``sleep`` failpoint); either may
  refuse with a clear message (superseded, batch gap), neither may hang; then a clean run.

Each iteration also draws its source (``--sources``): the job's files, or the same records in a topic of a Kafka
broker the soak starts (:mod:`verify.soak_kafka`), each with its own native reference.

The whole output (every row of every batch, :mod:`verify.output_diff`) must equal the native
reference's, and after it ``misa ckpt verify`` must find the DFS copy sound.

One small input per job is generated once per soak; its native reference and a clean run in misa
mode (which must equal the reference, and whose wall time bounds the random delays) come first.
The runs are spark-submits (one at a time, but for standby's two drivers), with Spark's checkpoint
on local disk.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import fsspec
import pyspark

from common.failpoints import ENV_VAR, FAILPOINTS, LOG_VAR, ONCE_VAR
from common.location import local_location
from jobs.cluster_monitoring import KEY_COLUMNS as CM_KEYS
from jobs.gen.cm import generate_cm
from jobs.gen.lr import generate_lr
from jobs.gen.nexmark import generate_nexmark
from jobs.gen.parts import LateArrivals
from jobs.submit import RETRY_MESSAGE
from misa.cli.main import name_list
from misa.config_keys import CommitMode
from misa.runtime.spark_log import SparkCheckpointLog
from services.s3_server import start_s3_server
from verify.cluster_start import start_named_apart
from verify.output_diff import Output, RowDiff, diff_rows, final_rows, read_output, without_batch_ids
from verify.soak_kafka import PARTITIONS, SOURCES, SoakTopics, kafka_layout, submit_options

ROOT = Path(__file__).resolve().parents[1]
FILES_PER_BATCH = 2
SHARDS = 2
MODES = (CommitMode.MISA.value, CommitMode.SYNC.value, CommitMode.ASYNC_CKPT.value)
DFS_KINDS = ("file", "s3")
TWICE = 0.3  # share of plans whose first restart is killed too
TIMED = 0.25  # share of kills at a random moment rather than at a failpoint
WORKER_KILLS = 0.3  # with worker processes: share of kills of one worker at a random moment
WORKER_KILL_WINDOW = (0.45, 0.95)  # when, as shares of a clean run: the workers live after Spark and the job start
PROCESSES = (1, 2)  # spark.misa.state.processes drawn per iteration (with executors: the number of hosts)
PLACEMENTS = ("driver", "executors")  # spark.misa.state.placement drawn per iteration, each half the time
STANDBY_REPLICAS = (0, 1)  # with executors: spark.misa.state.standbyReplicas drawn per iteration
CLUSTER = "local-cluster[2,{slots},1024]"  # the executors placement's master: two executor JVMs of (at least) two slots
EXECUTOR_KILLS = 0.5  # with executors: share of kills of an executor JVM (at a host's failpoint or at a random moment)
DRIVER_POINTS = ("mirror.put", "mirror.after_copy", "mirror.after_remove")  # failpoints hit in the driver alone
SCENARIOS = ("kill", "standby", "moved", "damaged", "retry")
RETRY_KILLED = 0.5  # share of retry plans with a kill before the retried run
RETRY_POINTS = ("commit.after_apply", "dfs.put")  # where a retried run's first start fails
# with worker processes: a failpoint of the driver's (the workers' counts restart with the workers a retry starts)
WORKER_RETRY_POINTS = ("mirror.put",)
STANDBY_SLOW_MS = 1000  # standby: each commit of both drivers sleeps this long, so that they overlap
STANDBY_START = (0.1, 0.7)  # standby: the second driver starts after this share of a clean run's time
DAMAGE_KINDS = ("flip", "delete")
BUCKET = "misa-soak"
#: Spark settings of every run: small and quick to start (see README, "Crash soak"); --conf overrides them.
CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.misa.state.shards": str(SHARDS),
    "spark.misa.state.retainVersions": "2",  # so that retention GC deletes versions in every run
    "spark.misa.checkpoint.retry.maxAttempts": "3",
    "spark.misa.checkpoint.retry.initialBackoff": "10ms",
    "spark.misa.checkpoint.retry.maxBackoff": "50ms",
    "spark.misa.checkpoint.retry.jitter": "5ms",
}


@dataclass(frozen=True)
class SoakJob:
    """A query of a job script, the generator of its small input (called with the folder and a seed) and, for
    an update-mode query, the key columns of its result (None: append output)."""

    script: str
    query: str
    generate: Callable[..., dict]
    keys: tuple[str, ...] | None


#: Out-of-order input: a tenth of the records arrive 12 s of event time late (beyond the jobs' watermark delay and
#: a batch's advance), so that late rows are judged as Spark judges them through every kill.
LATE = LateArrivals(0.1, 12.0)
JOBS = {
    "cm2": SoakJob(
        "cluster_monitoring.py",
        "cm2",
        partial(generate_cm, rate=100, seconds=40, files_per_second=0.25, jobs=100, progress=False, late=LATE),
        CM_KEYS["cm2"],
    ),
    "lr2": SoakJob(
        "linear_road.py",
        "lr2",
        partial(generate_lr, rate=2, seconds=150, files_per_second=1 / 15, progress=False, late=LATE),
        None,
    ),
    "q20": SoakJob(
        "nexmark.py",
        "q20",
        partial(generate_nexmark, rate=100, seconds=40, files_per_second=0.25, side_rows=10, progress=False, late=LATE),
        None,
    ),
}


@dataclass(frozen=True)
class Kill:
    """A planned SIGKILL: at the ``hit``-th hit of failpoint ``point`` (``action`` kill: of the process that hits it;
    killexecutor: of the executor JVM of the state host that hits it), or (no point) of the whole spark-submit process
    group (``worker``: of one state worker process; ``executor``: of one executor JVM) ``delay_s`` seconds after it
    started."""

    point: str | None = None
    hit: int = 0
    delay_s: float = 0.0
    worker: bool = False
    executor: bool = False
    action: str = "kill"

    @property
    def failpoints(self) -> str:
        """The ``MISA_FAILPOINTS`` value of the run."""
        return f"{self.point}={self.action}({self.hit})" if self.point else ""

    @property
    def partial(self) -> bool:
        """Whether the kill takes one process of the run and leaves the driver to end on its own."""
        return self.worker or self.executor

    def __str__(self) -> str:
        if self.point:
            return f"{self.point}#{self.hit}{' (executor)' if self.action == 'killexecutor' else ''}"
        what = "a worker " if self.worker else "an executor " if self.executor else ""
        return f"{what}after {self.delay_s:.1f}s"


@dataclass(frozen=True)
class Damage:
    """Damage done to the DFS between two runs: one byte of an SST or meta file flipped, or the file deleted;
    ``seed`` picks the file (and the byte)."""

    kind: str  # flip | delete
    seed: int

    def __str__(self) -> str:
        return f"{self.kind} a DFS file"


@dataclass(frozen=True)
class Plan:
    """What one iteration runs: the job, the commit mode, the DFS kind, the scenario and its draws: the kills
    before the final run, the damage (damaged), the failpoint of the retried start (retry) and when the
    second driver starts (standby)."""

    job: str
    mode: str
    dfs: str
    kills: tuple[Kill, ...]
    scenario: str = "kill"
    damage: Damage | None = None
    retry: str | None = None
    standby_s: float = 0.0
    processes: int = 1
    placement: str = "driver"
    source: str = "files"
    standby_replicas: int = 0

    @property
    def on_executors(self) -> bool:
        return self.placement == "executors"


def max_hits(point: str, versions: int) -> int:
    """About how often ``point`` is hit in a run over ``versions`` versions (kills are drawn up to this)."""
    if point.startswith(("recovery.", "replay.")):  # once per recovery or replay
        return 2
    if point == "mirror.after_remove":  # Spark removes log entries only at a replay in these short runs
        return 2
    if point == "dfs.get":  # only when a version is restored from the DFS: each file of each shard
        return 4 * SHARDS
    per_version = {
        "ckpt.after_local_checkpoint": SHARDS,
        "dfs.put": 4 * SHARDS,
        "mirror.put": 3,
        "mirror.after_copy": 3,
    }.get(point, 1)
    return per_version * versions


def sample_kill(
    rng: random.Random, versions: int, clean_s: float, workers: bool = False, executors: bool = False
) -> Kill:
    """A kill at a random failpoint and hit, or of the process group after 20-100 % of a clean run, or (``workers``:
    the run has state worker processes) of one worker within :data:`WORKER_KILL_WINDOW` of a clean run, or
    (``executors``: the state is on the executors) of one executor JVM, at a random hit of a failpoint of its host
    or within the same window."""
    if executors and rng.random() < EXECUTOR_KILLS:
        if rng.random() < TIMED:
            return Kill(delay_s=round(rng.uniform(*WORKER_KILL_WINDOW) * clean_s, 1), executor=True)
        point = rng.choice(sorted(set(FAILPOINTS) - set(DRIVER_POINTS)))
        return Kill(point, rng.randint(1, max_hits(point, versions)), action="killexecutor")
    if workers and rng.random() < WORKER_KILLS:
        return Kill(delay_s=round(rng.uniform(*WORKER_KILL_WINDOW) * clean_s, 1), worker=True)
    if rng.random() < TIMED:
        return Kill(delay_s=round(rng.uniform(0.2, 1.0) * clean_s, 1))
    point = rng.choice(sorted(FAILPOINTS))
    return Kill(point, rng.randint(1, max_hits(point, versions)))


def sample_kills(
    rng: random.Random, versions: int, clean_s: float, workers: bool = False, executors: bool = False
) -> tuple[Kill, ...]:
    """One kill, or (share :data:`TWICE`) two in a row."""
    return tuple(
        sample_kill(rng, versions, clean_s, workers, executors) for _ in range(2 if rng.random() < TWICE else 1)
    )


def sample_plan(
    rng: random.Random,
    jobs: Sequence[str],
    modes: Sequence[str],
    dfs_kinds: Sequence[str],
    versions: dict[str, int],
    clean_s: dict[tuple[str, str], float],
    scenarios: Sequence[str] = SCENARIOS,
    processes: Sequence[int] = PROCESSES,
    placements: Sequence[str] = PLACEMENTS,
    sources: Sequence[str] = ("files",),
    standby_replicas: Sequence[int] = (0,),
) -> Plan:
    """One iteration's plan; ``versions``: per job, the batches of its input; ``clean_s``: per job and placement, a
    clean run's time. The source, then (state on the executors) the standby replicas are drawn last, each only among
    several, so a seed's other draws stay as they were."""
    plan = _sample_runs(rng, jobs, modes, dfs_kinds, versions, clean_s, scenarios, processes, placements)
    plan = replace(plan, source=_draw(rng, sources))
    return replace(plan, standby_replicas=_draw(rng, standby_replicas)) if plan.on_executors else plan


def _draw(rng: random.Random, choices: Sequence[Any]) -> Any:
    """One of ``choices``, drawing from ``rng`` only when there are several."""
    return rng.choice(list(choices)) if len(choices) > 1 else choices[0]


def _sample_runs(
    rng: random.Random,
    jobs: Sequence[str],
    modes: Sequence[str],
    dfs_kinds: Sequence[str],
    versions: dict[str, int],
    clean_s: dict[tuple[str, str], float],
    scenarios: Sequence[str],
    processes: Sequence[int],
    placements: Sequence[str],
) -> Plan:
    """:func:`sample_plan`'s draws but the source."""
    job = rng.choice(list(jobs))
    mode, dfs = rng.choice(list(modes)), rng.choice(list(dfs_kinds))
    scenario = rng.choice(list(scenarios))
    plan = Plan(job, mode, dfs, (), scenario, processes=rng.choice(list(processes)), placement=rng.choice(placements))
    clean = clean_s[job, plan.placement]
    # a host's failpoints fire in its own process, like a worker's: the driver's own are the ones to raise at a retry
    apart, hosts = plan.processes > 1 or plan.on_executors, plan.on_executors
    workers = plan.processes > 1 and not hosts
    if scenario == "standby":
        return replace(plan, standby_s=round(rng.uniform(*STANDBY_START) * clean, 1))
    if scenario == "retry":
        kills = (sample_kill(rng, versions[job], clean, workers, hosts),) if rng.random() < RETRY_KILLED else ()
        return replace(plan, kills=kills, retry=rng.choice(WORKER_RETRY_POINTS if apart else RETRY_POINTS))
    plan = replace(plan, kills=sample_kills(rng, versions[job], clean, workers, hosts))
    if scenario == "damaged":
        return replace(plan, damage=Damage(rng.choice(DAMAGE_KINDS), rng.randrange(1 << 32)))
    return plan


def cluster(hosts: int, standby_replicas: int) -> str:
    """The local cluster of an iteration with ``hosts`` state hosts, each with ``standby_replicas`` standbys: two
    executors of two task slots, or more slots when the hosts and their standbys need them (a host holds a slot, and
    the query's tasks need one besides)."""
    slots = max(2, math.ceil((hosts * (1 + standby_replicas) + 1) / 2))
    return CLUSTER.format(slots=slots)


def iteration_rng(seed: int, index: int) -> random.Random:
    """The random source of iteration ``index`` alone, so one iteration can be re-run (``--first``)."""
    return random.Random(f"{seed}:{index}")


# ---------------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Run:
    """One spark-submit of an iteration: its planned kill, its own state dir (a folder of the iteration's, as
    if on another machine; None: the job's default under the checkpoint), failpoints and Spark conf besides the
    soak's, ``--retry-start``, its delay after the other runs of its stage, whether it is the final run, and the
    errors whose clear refusal is an accepted end of it."""

    label: str
    kill: Kill | None = None
    state_dir: str | None = None
    failpoints: str = ""
    conf: tuple[tuple[str, str], ...] = ()
    retry_start: int = 0
    delay_s: float = 0.0
    final: bool = False
    may_refuse: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.label


Stage = tuple[Run, ...] | Damage  # runs started together (each after its delay), or damage to the DFS
STANDBY_REFUSALS = ("OwnershipError", "RecoveryError", "ConcurrentModificationException", "UserError")


def retry_failure(point: str, conf: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The failpoints and Spark conf that make a run's first start fail once, at ``point``: ``commit.after_apply``
    raises once and the commit is not redone; ``dfs.put`` (and ``mirror.put``, Spark's log mirrored by the driver)
    raises as often as one file is tried, files being uploaded one at a time."""
    if point in ("dfs.put", "mirror.put"):
        return f"{point}=raise({conf['spark.misa.checkpoint.retry.maxAttempts']})", {
            "spark.misa.checkpoint.uploadThreads": "1"
        }
    return f"{point}=raise(1)", {"spark.misa.commit.maxRestarts": "0"}


def stages(plan: Plan, conf: Mapping[str, str]) -> list[Stage]:
    """What an iteration of ``plan`` does, in order (``conf``: the soak's Spark conf)."""
    if plan.scenario == "standby":
        slow = f"commit.after_apply=sleep({STANDBY_SLOW_MS})"
        first = Run("driver A", state_dir="state-a", failpoints=slow, may_refuse=STANDBY_REFUSALS)
        second = replace(
            first, label=f"driver B after {plan.standby_s:.1f}s", state_dir="state-b", delay_s=plan.standby_s
        )
        return [(first, second), (Run("final", state_dir="state-b", final=True),)]
    moved = plan.scenario == "moved"
    runs: list[Stage] = [
        (Run(f"kill {kill}", kill, state_dir=f"state-{n}" if moved else None),) for n, kill in enumerate(plan.kills, 1)
    ]
    final = Run("final", state_dir=f"state-{len(plan.kills) + 1}" if moved else None, final=True)
    if plan.retry:
        failpoints, extra = retry_failure(plan.retry, conf)
        final = replace(
            final, label=f"retry {failpoints}", failpoints=failpoints, conf=tuple(extra.items()), retry_start=1
        )
    return [*runs, *([plan.damage] if plan.damage else []), (final,)]


def describe(steps: list[Stage]) -> list[str]:
    """The stages as the progress line shows them (a plain final run is left out)."""
    shown = [str(s) if isinstance(s, Damage) else " & ".join(run.label for run in s) for s in steps]
    return [text for text in shown if text != "final"]


@dataclass(frozen=True)
class Attempt:
    """One spark-submit of an iteration: its label, whether its planned kill fired, exit code (None: hung),
    time, log."""

    label: str
    fired: bool
    exit: int | None
    seconds: float
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    @property
    def retried(self) -> bool:
        """Whether the driver called ``start()`` again after its query failed (``--retry-start``)."""
        return RETRY_MESSAGE in self.text()

    @property
    def refusal(self) -> str | None:
        """The last refusal in the log (see :func:`refusal`)."""
        return refusal(self.text())


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL every process of ``proc``'s group (spark-submit's JVM, the Python driver, Python workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _processes_of(group: int, marker: bytes) -> list[int]:
    """The processes in process group ``group`` whose command line holds ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.getpgid(int(proc.name)) == group:
                if marker in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
        except (ProcessLookupError, PermissionError, FileNotFoundError):
            continue
    return sorted(found)


STATE_WORKER = b"spawn_main"  # a state worker process: multiprocessing's spawned child
EXECUTOR = b"CoarseGrainedExecutorBackend"  # an executor JVM of a local cluster


def _kill_one_of(proc: subprocess.Popen, marker: bytes, deadline: float) -> tuple[int | None, bool]:
    """SIGKILL one process of ``proc``'s group whose command line holds ``marker`` (a state worker, an executor JVM),
    then wait for the driver to end on its own by ``deadline``: its exit code (None: still running, then killed) and
    whether there was such a process to kill."""
    victims = _processes_of(proc.pid, marker)
    if victims:
        os.kill(victims[-1], signal.SIGKILL)
    try:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic())), bool(victims)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.wait()
        return None, bool(victims)


def run_attempt(
    cmd: list[str], env: dict[str, str], log: Path, deadline: float, kill: Kill | None, failpoints: str = ""
) -> Attempt:
    """Run ``cmd`` in its own process group until it exits, ``kill`` fires, or ``deadline`` (monotonic) passes;
    ``failpoints``: more ``MISA_FAILPOINTS`` beside the kill's. A worker kill leaves the driver to end by itself."""
    started = time.monotonic()
    timed = kill is not None and kill.point is None
    until = min(deadline, started + kill.delay_s) if timed else deadline
    told = log.with_suffix(".failpoints")  # what failpoints did, state hosts' included (their stderr is the executor's)
    once = log.with_suffix(".fired")  # a kill fires once: not again in the host that takes a killed one's partition
    shutil.rmtree(once, ignore_errors=True)
    once.mkdir(parents=True)
    with log.open("w") as out:

        def start() -> subprocess.Popen:
            return subprocess.Popen(
                cmd,
                env={
                    **env,
                    ENV_VAR: ";".join(filter(None, [kill.failpoints if kill else "", failpoints])),
                    LOG_VAR: str(told),
                    ONCE_VAR: str(once),
                },
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        proc = start_named_apart(start, log) if any("local-cluster" in part for part in cmd) else start()
        try:
            code: int | None = proc.wait(timeout=max(0.0, until - time.monotonic()))
            stopped = False
        except subprocess.TimeoutExpired:
            if kill is not None and kill.partial and until < deadline:
                code, fired = _kill_one_of(proc, STATE_WORKER if kill.worker else EXECUTOR, deadline)
                _kill_group(proc)
                return Attempt(str(kill), fired, code, time.monotonic() - started, log)
            _kill_group(proc)
            proc.wait()
            code, stopped = None, True
        _kill_group(proc)  # Python workers the driver's death left behind
    fired = stopped and timed and until < deadline
    if fired:
        code = -signal.SIGKILL
    elif kill is not None and kill.point:
        fired = f"failpoint {kill.point}: killing" in (told.read_text() if told.exists() else "")
    keep_executor_logs(log)
    return Attempt(str(kill) if kill else "-", fired, code, time.monotonic() - started, log)


def keep_executor_logs(log: Path) -> None:
    """Move the executors' logs of the local cluster of the run that wrote ``log`` (kept in pyspark's own folder,
    ``work/APP-ID``) beside it, as ``<log>.executors``."""
    app = re.search(r"app-\d{14}-\d{4}", log.read_text(errors="replace"))
    folder = Path(pyspark.__file__).parent / "work" / app.group() if app else None
    if folder is not None and folder.exists():
        shutil.move(folder, log.with_suffix(".executors"))


# the errors a run may refuse with; each message names its cause (and usually the fix)
REFUSAL = re.compile(
    r"\b(OwnershipError|RecoveryError|CorruptCheckpointError|CommitFailedError|DfsUnavailableError"
    r"|ConcurrentModificationException|ShardCountError): "
)
# Spark's own refusal of a second query on its checkpoint, as the driver's StreamingQueryException words it: two
# queries on one source log, or two drivers writing the same entry of the offsets or commits log
SPARK_CONCURRENT = re.compile(r"Multiple streaming (?:queries are concurrently using|jobs detected for) .+")
# a job's one-line report of a user error at start (jobs.submit.USER_ERRORS: configuration, location, ownership,
# recovery), which names no class
USER_ERROR = re.compile(r"^error: (.+)")
FIX_HINTS = ("misa ckpt", "allowPreviousVersion", "delete", "start from", "restart", "stop ")


def refusal(log_text: str) -> str | None:
    """The last refusal in a run's log, ``Name: message`` (``UserError`` for a job's one-line report), or None.
    When an error's message names another (a failed commit and its cause), the innermost one is kept: its
    message is the rest of the line."""
    found = None
    for line in log_text.splitlines():
        names = list(REFUSAL.finditer(line))
        spark, user = SPARK_CONCURRENT.search(line), USER_ERROR.match(line)
        if names:
            found = f"{names[-1].group(1)}: {line[names[-1].end() :].strip()}"
        elif spark:
            found = f"ConcurrentModificationException: {spark.group(0).strip()}"
        elif user:
            found = f"UserError: {user.group(1).strip()}"
    return found[:1000] if found else None


def damaged_names(relative: str) -> tuple[str, str]:
    """A damaged DFS file's name and the local file it is a copy of (``000009-<sha16>.sst`` -> ``000009.sst``)."""
    name = relative.rsplit("/", 1)[-1]
    return name, re.sub(r"-[0-9a-f]{16}(\.sst)?$", r"\1", name)


def names_damage(message: str, damaged: str) -> bool:
    """Whether a refusal names the damaged file (its DFS or local name) and a fix."""
    return any(name in message for name in damaged_names(damaged)) and any(h in message for h in FIX_HINTS)


def outcome(run: Run, attempt: Attempt, damaged: str | None) -> tuple[str, str] | None:
    """(result, detail) when the iteration ends at ``attempt`` (a hang, an error, or a clear refusal after the DFS
    was damaged: ``refused``); None when the run ended as planned: exit 0, its kill fired, or an accepted refusal."""
    if attempt.exit is None:
        return "hang", f"{attempt.log.name} still running at the iteration timeout\n{attempt.tail()}"
    executor_lost = run.kill is not None and (run.kill.executor or run.kill.action == "killexecutor")
    if attempt.fired and executor_lost and attempt.exit != 0:
        return "error", (
            f"the run {run} exited with {attempt.exit} after its executor kill ({attempt.log.name}): a lost executor "
            f"must move its hosts' partitions, not fail the query\n{attempt.tail()}"
        )
    if attempt.fired or attempt.exit == 0:
        return None
    message = attempt.refusal
    if message and message.split(":", 1)[0] in run.may_refuse:
        return None
    if message and damaged and names_damage(message, damaged):
        return "refused", message
    what = "the final run" if run.final else f"the run {run}"
    said = f"\n{message}" if message else ""
    return "error", f"{what} exited with {attempt.exit} ({attempt.log.name}){said}\n{attempt.tail()}"


@dataclass
class Record:
    """The outcome of one iteration (one JSON line of ``--out``)."""

    iteration: int
    seed: int
    job: str
    mode: str
    dfs: str
    plan: list[str]
    scenario: str = "kill"
    processes: int = 1  # spark.misa.state.processes of every run
    placement: str = "driver"  # spark.misa.state.placement of every run
    source: str = "files"  # the job's files, or the same records on a Kafka topic
    standby_replicas: int = 0  # spark.misa.state.standbyReplicas of every run (state on the executors)
    kills: list[str] = field(default_factory=list)  # the planned kills that fired
    attempts: list[dict] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # "<run>: <message>" of runs that refused
    damage: str = ""  # what was done to the DFS
    retried: bool = False  # a run called start() again after its query failed
    seconds: float = 0.0
    result: str = "ok"  # ok | refused | relayout | mismatch | dfs-damaged | hang | error
    lost: int = 0
    extra: int = 0
    doubled: int = 0
    detail: str = ""
    run_dir: str = ""

    def add(self, run: Run, attempt: Attempt) -> None:
        refused = attempt.refusal if attempt.exit not in (0, None) and not attempt.fired else None
        self.attempts.append(
            {
                "run": run.label,
                "fired": attempt.fired,
                "exit": attempt.exit,
                "seconds": round(attempt.seconds, 1),
                "retried": attempt.retried,
                "refusal": refused,
            }
        )
        if attempt.fired:
            self.kills.append(attempt.label)
        if refused:
            self.refusals.append(f"{run.label}: {refused}")
        self.retried = self.retried or attempt.retried

    def line(self, last: int) -> str:
        """The progress line: scenario, plan, the kills that fired, result and time."""
        result = {"ok": "ok", "refused": "REFUSED (clear)", "relayout": "RELAYOUT", "hang": "HANG"}.get(
            self.result, self.result.upper()
        )
        if self.result == "mismatch":
            result = f"MISMATCH: lost {self.lost}, extra {self.extra} (doubled {self.doubled})"
        events = [f"fired: {', '.join(self.kills) or 'none'}"]
        events += [self.damage] if self.damage else []
        events += ["start() retried"] if self.retried else []
        events += [f"{len(self.refusals)} refusal(s)"] if self.refusals else []
        return (
            f"[{self.iteration:4d}/{last}] {self.scenario:7} {self.job} {self.placement[0]}{self.processes}"
            f"{f'+{self.standby_replicas}s' if self.standby_replicas else ''} "
            f"{self.mode:10} {self.dfs:4} {self.source:5} "
            f"{' + '.join(self.plan)}; {'; '.join(events)} | {result} {self.seconds:.0f}s"
        )


def damage_dfs(fs: Any, root: str, damage: Damage) -> tuple[str, str] | None:
    """Do ``damage`` to one of the SST and meta files under ``root`` (an fsspec file system's path): the file's
    path relative to ``root`` and what was done (an empty file is deleted), or None when there is no such file."""
    root = root.rstrip("/")
    files = sorted(p for p in fs.find(root) if re.search(r"/shard-\d+/(sst|meta)/[^/]+$", p))
    if not files:
        return None
    rng = random.Random(damage.seed)
    path = rng.choice(files)
    data = bytearray(fs.cat_file(path))
    if damage.kind == "delete" or not data:
        fs.rm_file(path)
        done = "deleted"
    else:
        offset = rng.randrange(len(data))
        data[offset] ^= 0xFF
        fs.pipe_file(path, bytes(data))
        done = f"flipped byte {offset} of"
    relative = path[len(root) + 1 :]
    return relative, f"{done} {relative}"


# ---------------------------------------------------------------------------------------------- judging

Layout = dict[int, tuple[str, ...]]  # batch id -> the input files it read (batches that read some)


def batch_layout(checkpoint: Path, source: str = "files") -> Layout:
    """The input each batch read, from Spark's checkpoint: the files (its offsets log and the file source's log),
    or on Kafka the offsets each batch ended at."""
    if source == "kafka":
        return kafka_layout(checkpoint)
    return {
        b: tuple(sorted(f.name for f in files)) for b, files in SparkCheckpointLog(checkpoint).batch_files().items()
    }


def describe_relayout(layout: Layout, expected: Layout) -> str:
    """Where a run's batches read other files than the reference's."""
    first = min(b for b in set(layout) | set(expected) if layout.get(b) != expected.get(b))
    return (
        f"the input was cut into other batches than in the reference ({len(layout)} batches, reference "
        f"{len(expected)}): batch {first} read {', '.join(layout.get(first, ())) or 'nothing'}, in the "
        f"reference {', '.join(expected.get(first, ())) or 'nothing'}"
    )


def settled_rows(spec: SoakJob, out: Path) -> Counter:
    """The output as far as it does not depend on the batches: rows without batch ids (append output)
    or the last row per key (update output)."""
    return without_batch_ids(read_output(out).rows) if spec.keys is None else final_rows(out, spec.keys)


@dataclass(frozen=True)
class Reference:
    """A job's native reference: its whole output, which files each batch read, and its settled rows."""

    output: Output
    layout: Layout
    settled: Counter

    @classmethod
    def of(cls, spec: SoakJob, run_dir: Path, source: str = "files") -> Reference:
        layout = batch_layout(run_dir / "ckpt", source)
        return cls(read_output(run_dir / "out"), layout, settled_rows(spec, run_dir / "out"))


def judge(spec: SoakJob, reference: Reference, run_dir: Path, source: str = "files") -> tuple[str, RowDiff, str]:
    """(result, diff, detail) of a finished run against the reference.

    When every batch read the reference's files the whole output must be equal: ``ok`` or ``mismatch``.
    Otherwise (Spark re-planned batches after a crash, see the README) the result is ``relayout``, or
    ``mismatch`` when even the settled rows differ.
    """
    layout = batch_layout(run_dir / "ckpt", source)
    if layout == reference.layout:
        diff = diff_rows(read_output(run_dir / "out").rows, reference.output.rows)
        return ("ok", diff, "") if diff.ok else ("mismatch", diff, diff.describe(reference.output.columns))
    diff = diff_rows(settled_rows(spec, run_dir / "out"), reference.settled)
    settled = "rows without batch ids" if spec.keys is None else "last row per key"
    return (
        "relayout" if diff.ok else "mismatch",
        diff,
        f"{describe_relayout(layout, reference.layout)}\n{settled}: {diff.describe()}",
    )


class Soak:
    """The soak's inputs, references, S3 server and runs under ``args.work``."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work: Path = args.work
        self.conf = {**CONF, **dict(item.split("=", 1) for item in args.conf)}
        self.env = dict(
            os.environ,
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        self.inputs: dict[str, Path] = {}
        self.versions: dict[str, int] = {}
        self.reference: dict[tuple[str, str], Reference] = {}  # per job and source
        self.reference_topic_rows: dict[str, Counter] = {}  # per job: its native reference's output topic
        self.clean_s: dict[tuple[str, str], float] = {}  # per job and placement: the longest source's
        self.topics = SoakTopics() if "kafka" in args.sources else None
        self.s3_server = None
        self.archive = self.work / "spark.jsa" if args.cds else None

    # ------------------------------------------------------------------ set-up
    def __enter__(self) -> Soak:
        for sub in ("input", "reference", "runs"):
            shutil.rmtree(self.work / sub, ignore_errors=True)
        if self.archive is not None:
            self.archive.unlink(missing_ok=True)  # made for this classpath and JVM, by the first run
        (self.work / "runs").mkdir(parents=True)
        if "s3" in self.args.dfs:
            self._start_s3()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.s3_server is not None:
            self.s3_server.stop()
        if self.topics is not None:
            self.topics.stop()

    def _start_s3(self) -> None:
        try:
            self.s3_server, env = start_s3_server()
        except ImportError as exc:
            raise SystemExit(
                "misa soak: --dfs s3 needs moto's server (pip install 'moto[server]', in the test "
                "extra), or choose --dfs file"
            ) from exc
        self.env.update(env)
        self._s3().create_bucket(Bucket=BUCKET)

    def _s3(self) -> Any:
        """A boto3 S3 client of the soak's server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def prepare(self, job: str) -> None:
        """Generate ``job``'s input (and write it into its topic), then per source run its native reference and a
        clean misa run per placement (which must equal it)."""
        spec = JOBS[job]
        data = self.inputs[job] = self.work / "input" / job
        stats = spec.generate(data, seed=self.args.seed)
        self.versions[job] = math.ceil(stats["files"] / FILES_PER_BATCH)
        print(f"{job}: {stats['records']} records in {stats['files']} files, {self.versions[job]} batches", flush=True)
        if self.topics is not None:
            records = self.topics.add(job, data, self.versions[job])
            print(f"  written into a topic of {PARTITIONS} partitions: {records} records", flush=True)
        for source in self.args.sources:
            self._prepare_source(job, source)

    def _prepare_source(self, job: str, source: str) -> None:
        """``job``'s native reference on ``source`` and a clean misa run per placement, which must equal it."""
        spec = JOBS[job]
        native_dir = self.work / "reference" / f"{job}-{source}"
        native = self._run_clean(job, "native", native_dir, source=source)
        reference = self.reference[job, source] = Reference.of(spec, native_dir, source)
        if not reference.output.size:
            raise SystemExit(f"misa soak: the native reference of {job} has no rows: the input is too small")
        if source == "kafka":
            assert self.topics is not None
            self.reference_topic_rows[job] = self.topics.output_rows(native_dir)
        print(f"  {source}: native reference {reference.output.size} rows ({native.seconds:.1f}s)", flush=True)
        for placement in self.args.placements:
            clean_dir = self.work / "reference" / f"{job}-{source}-misa-{placement}"
            clean = self._run_clean(job, CommitMode.MISA, clean_dir, placement, source)
            self.clean_s[job, placement] = max(clean.seconds, self.clean_s.get((job, placement), 0.0))
            result, _, detail = self._judge(job, source, clean_dir)
            print(f"  {source}: clean misa run, state on the {placement}: {result} ({clean.seconds:.1f}s)", flush=True)
            if result != "ok":
                raise SystemExit(
                    f"misa soak: a clean {job} run on {source} in misa mode (state on the {placement}) differs from "
                    f"the native reference, so kills cannot be judged:\n{detail}"
                )

    def _run_clean(
        self, job: str, mode: str, run_dir: Path, placement: str = "driver", source: str = "files"
    ) -> Attempt:
        run_dir.mkdir(parents=True)
        attempt = run_attempt(
            self.command(job, mode, run_dir, local_location(run_dir / "dfs").url, placement=placement, source=source),
            self.env,
            run_dir / "run.log",
            time.monotonic() + self.args.iteration_timeout,
            None,
        )
        if attempt.exit != 0:
            raise SystemExit(
                f"misa soak: the clean {mode} run of {job} failed (exit {attempt.exit}):\n{attempt.tail()}"
            )
        return attempt

    def java_options(self) -> str:
        """The driver JVM's options: the configured ones and class data sharing (CDS) when ``--cds``.

        The first run writes the archive of the classes it loaded at exit; later runs map it, which
        cuts the JVM's start. A run whose archive is missing or unusable starts without it.
        """
        options = self.conf.get("spark.driver.extraJavaOptions", "")
        if self.archive is None:
            return options
        share = "SharedArchiveFile" if self.archive.exists() else "ArchiveClassesAtExit"
        return f"{options} -XX:{share}={self.archive}".strip()

    def command(
        self,
        job: str,
        mode: str,
        run_dir: Path,
        dfs: str,
        run: Run | None = None,
        processes: int = 1,
        placement: str = "driver",
        source: str = "files",
        standby_replicas: int = 0,
    ) -> list[str]:
        """The spark-submit command line of ``job`` in ``mode`` writing under ``run_dir`` (``run``: its own state
        dir, Spark conf and ``--retry-start``; ``processes``: state worker processes or hosts, unless ``--conf`` sets
        them; ``placement`` executors: on a local cluster, the state on its executors; ``source``: its files or its
        topic; ``standby_replicas``: of each state host's partition, on the executors)."""
        spec = JOBS[job]
        conf = {**self.conf, **dict(run.conf if run else ()), "spark.driver.extraJavaOptions": self.java_options()}
        conf.setdefault("spark.misa.state.processes", str(processes))
        conf.setdefault("spark.misa.state.placement", placement)
        if standby_replicas:
            conf.setdefault("spark.misa.state.standbyReplicas", str(standby_replicas))
        master = (
            cluster(
                int(hosts) if (hosts := conf["spark.misa.state.processes"]).isdigit() else processes, standby_replicas
            )
            if placement == "executors"
            else "local[2]"
        )
        cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", master]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        if source == "kafka":
            assert self.topics is not None
            cmd += submit_options()
            read = self.topics.arguments(job, run_dir)
        else:
            read = ["--input", str(self.inputs[job]), "--max-files-per-trigger", str(FILES_PER_BATCH)]
        cmd += [
            str(ROOT / "jobs" / spec.script),
            "--query",
            spec.query,
            "--mode",
            mode,
            *read,
            "--output",
            str(run_dir / "out"),
            "--checkpoint",
            str(run_dir / "ckpt"),
            "--dfs",
            dfs,
            "--available-now",
            "--watermark-delay",
            "5s",
            "--quiet",
        ]
        if run and run.state_dir:
            cmd += ["--state-dir", str(run_dir / run.state_dir)]
        if run and run.retry_start:
            cmd += ["--retry-start", str(run.retry_start)]
        return cmd

    # ------------------------------------------------------------------ iterations
    def dfs_url(self, plan: Plan, index: int, run_dir: Path) -> str:
        """The DFS of an iteration: a folder of its own, or a prefix of its own in the bucket."""
        return local_location(run_dir / "dfs").url if plan.dfs == "file" else f"s3://{BUCKET}/{index:04d}"

    def filesystem(self, url: str) -> tuple[Any, str]:
        """An fsspec file system and path of ``url`` (the soak's S3 server for ``s3://``)."""
        options: dict[str, Any] = {}
        if url.startswith("s3://"):
            options = dict(
                endpoint_url=self.env["AWS_ENDPOINT_URL"], key="testing", secret="testing", skip_instance_cache=True
            )
        return fsspec.core.url_to_fs(url, **options)

    def iteration(self, index: int, plan: Plan) -> Record:
        """Run ``plan``'s stages (runs, damage to the DFS), then compare the output with the reference and
        verify the DFS copy."""
        run_dir = self.work / "runs" / f"{index:04d}"
        run_dir.mkdir()
        dfs = self.dfs_url(plan, index, run_dir)
        steps = stages(plan, self.conf)
        record = Record(
            index,
            self.args.seed,
            plan.job,
            plan.mode,
            plan.dfs,
            describe(steps),
            plan.scenario,
            plan.processes,
            plan.placement,
            plan.source,
            plan.standby_replicas,
            run_dir=str(run_dir),
        )
        started = time.monotonic()
        deadline = started + self.args.iteration_timeout
        ended = self._run_stages(plan, steps, run_dir, dfs, deadline, record)
        if ended:
            record.result, record.detail = ended
        else:
            record.result, diff, record.detail = self._judge(plan.job, plan.source, run_dir)
            record.lost, record.extra, record.doubled = diff.lost, diff.extra_rows, diff.doubled
            if record.result == "ok":
                self._verify_dfs(dfs, record)
        record.seconds = round(time.monotonic() - started, 1)
        if record.result == "ok" and not self.args.keep_runs:  # a refusal's folder stays, like a failure's
            self._remove(run_dir, f"{index:04d}/" if plan.dfs == "s3" else None)
        return record

    def _judge(self, job: str, source: str, run_dir: Path) -> tuple[str, RowDiff, str]:
        """:func:`judge` of the run's output against the reference; on Kafka, when equal, its output topic's
        committed rows against the reference's too."""
        judged = judge(JOBS[job], self.reference[job, source], run_dir, source)
        if source != "kafka" or judged[0] != "ok":
            return judged
        assert self.topics is not None
        diff = diff_rows(self.topics.output_rows(run_dir), self.reference_topic_rows[job])
        return ("ok", diff, "") if diff.ok else ("mismatch", diff, f"the output topic: {diff.describe()}")

    def _run_stages(
        self, plan: Plan, steps: list[Stage], run_dir: Path, dfs: str, deadline: float, record: Record
    ) -> tuple[str, str] | None:
        """Do ``steps`` in order until one ends the iteration: its (result, detail), or None when all ran."""
        number = 0
        damaged: str | None = None
        for step in steps:
            if isinstance(step, Damage):
                done = damage_dfs(*self.filesystem(dfs), step)
                damaged, record.damage = done or (None, "no SST or meta file on the DFS to damage")
                continue
            logs = [run_dir / f"run-{number + n}.log" for n in range(1, len(step) + 1)]
            number += len(step)
            with ThreadPoolExecutor(len(step)) as pool:
                attempts = list(
                    pool.map(lambda run, log: self._run(plan, run, run_dir, dfs, log, deadline), step, logs)
                )
            for run, attempt in zip(step, attempts):
                record.add(run, attempt)
            for run, attempt in zip(step, attempts):
                ended = outcome(run, attempt, damaged)
                if ended:
                    return ended
        return None

    def _run(self, plan: Plan, run: Run, run_dir: Path, dfs: str, log: Path, deadline: float) -> Attempt:
        """One spark-submit of ``run``, started after its delay."""
        time.sleep(max(0.0, min(run.delay_s, deadline - time.monotonic())))
        cmd = self.command(
            plan.job, plan.mode, run_dir, dfs, run, plan.processes, plan.placement, plan.source, plan.standby_replicas
        )
        return run_attempt(cmd, self.env, log, deadline, run.kill, run.failpoints)

    def _verify_dfs(self, dfs: str, record: Record) -> None:
        """``misa ckpt verify --deep`` (every SHA-256) of the iteration's DFS: damage it finds makes the result
        ``dfs-damaged``."""
        misa = [sys.executable, "-c", "import sys; from misa.cli import main; sys.exit(main())"]
        cmd = [*misa, "ckpt", "verify", "--deep", dfs]
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            record.result = "dfs-damaged"
            record.detail = (
                f"misa ckpt verify {dfs} after the final run (exit {done.returncode}):\n"
                + (done.stdout + done.stderr).strip()
            )

    def _remove(self, run_dir: Path, s3_prefix: str | None) -> None:
        """Delete a passed iteration's folder and its objects in the bucket."""
        shutil.rmtree(run_dir, ignore_errors=True)
        if s3_prefix:
            s3 = self._s3()
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=s3_prefix):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


def kill_kind(label: str) -> str:
    """What a fired kill's label (:class:`Kill`'s text) counts as: its failpoint (an executor's kill marked so) or a
    timed kill of the group, a worker or an executor."""
    if "#" in label:
        return label.split("#")[0] + (" (executor)" if label.endswith("(executor)") else "")
    return {"a": "timed worker", "an": "timed executor"}.get(label.split()[0], "timed")


PASSED = ("ok", "refused")  # results that are not failures: exact output, or a clear refusal of a damaged DFS


def summarize(records: Sequence[Record]) -> dict:
    """Totals over the iterations: results (in all and per scenario), kills that fired per point, retried starts,
    refusals with their messages, lost and doubled rows, failures."""
    fired = Counter(kill_kind(k) for r in records for k in r.kills)
    scenarios: dict[str, Counter] = {}
    placements: dict[str, Counter] = {}
    sources: dict[str, Counter] = {}
    for r in records:
        scenarios.setdefault(r.scenario, Counter())[r.result] += 1
        where = f"{r.placement} with {r.standby_replicas} standby" if r.standby_replicas else r.placement
        placements.setdefault(where, Counter())[r.result] += 1
        sources.setdefault(r.source, Counter())[r.result] += 1
    return {
        "iterations": len(records),
        "results": dict(Counter(r.result for r in records)),
        "by_scenario": {name: dict(results) for name, results in sorted(scenarios.items())},
        "by_placement": {name: dict(results) for name, results in sorted(placements.items())},
        "by_source": {name: dict(results) for name, results in sorted(sources.items())},
        "no_kill_iterations": sum(1 for r in records if not r.kills),
        "kills_by_point": dict(sorted(fired.items())),
        "retried_starts": sum(1 for r in records if r.retried),
        "refusals": [f"{r.iteration} ({r.scenario}) {message}" for r in records for message in r.refusals],
        "lost_rows": sum(r.lost for r in records),
        "extra_rows": sum(r.extra for r in records),
        "doubled_rows": sum(r.doubled for r in records),
        "relayouts": sum(1 for r in records if r.result == "relayout"),
        "hangs": sum(1 for r in records if r.result == "hang"),
        "errors": sum(1 for r in records if r.result == "error"),
        "failed": [r.iteration for r in records if r.result not in PASSED],
        "mean_iteration_s": round(sum(r.seconds for r in records) / max(1, len(records)), 1),
    }


def summary_text(summary: dict, refusal_chars: int = 300) -> str:
    """The summary for people: totals, a line per scenario, then every refusal's message (cut)."""
    kills = ", ".join(f"{point} {n}" for point, n in summary["kills_by_point"].items()) or "none"

    def results(counts: dict[str, int]) -> str:
        return ", ".join(f"{n} {result}" for result, n in counts.items())

    return "\n".join(
        [
            f"soak: {summary['iterations']} iterations ({summary['mean_iteration_s']}s each on average): "
            + results(summary["results"]),
            *[f"  {name}: {results(counts)}" for name, counts in summary["by_scenario"].items()],
            *[f"  state on the {name}: {results(counts)}" for name, counts in summary["by_placement"].items()],
            *[f"  on {name}: {results(counts)}" for name, counts in summary["by_source"].items()],
            f"kills that fired: {kills}; iterations where no kill fired: {summary['no_kill_iterations']}; "
            f"retried starts: {summary['retried_starts']}",
            f"lost rows {summary['lost_rows']}, extra rows {summary['extra_rows']} "
            f"(doubled {summary['doubled_rows']}), "
            f"relayouts {summary['relayouts']}, hangs {summary['hangs']}, errors {summary['errors']}",
            f"refusals: {len(summary['refusals'])}",
            *[f"  {message[:refusal_chars]}" for message in summary["refusals"]],
            f"failed iterations: {summary['failed'] or 'none'}",
        ]
    )


def iterations(args: argparse.Namespace, soak: Soak) -> Iterator[tuple[int, Plan]]:
    """Each iteration's number and plan (``--only``: those numbers; else ``--first`` on)."""
    for index in args.only or range(args.first, args.first + args.iterations):
        yield (
            index,
            sample_plan(
                iteration_rng(args.seed, index),
                args.jobs,
                args.modes,
                args.dfs,
                soak.versions,
                soak.clean_s,
                args.scenarios,
                args.processes,
                args.placements,
                args.sources,
                args.standby_replicas,
            ),
        )


def run(args: argparse.Namespace) -> int:
    """The ``misa soak`` command: exit status 1 on any difference, hang or error."""
    out: Path = args.out or args.work / "soak.jsonl"
    records: list[Record] = []
    with Soak(args) as soak:
        for job in args.jobs:
            soak.prepare(job)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w") as lines:
            for index, plan in iterations(args, soak):
                record = soak.iteration(index, plan)
                records.append(record)
                print(record.line(max(args.only or [args.first + args.iterations - 1])), flush=True)
                if record.detail:
                    print("    " + record.detail.replace("\n", "\n    "), flush=True)
                lines.write(json.dumps(asdict(record)) + "\n")
                lines.flush()
            summary = summarize(records)
            lines.write(json.dumps({"summary": summary}) + "\n")
    print(summary_text(summary))
    return 0 if not summary["failed"] else 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "soak",
        help="randomized crash soak: kill the jobs anywhere, start standby drivers, move drivers, damage the DFS, "
        "retry start(); compare with plain Spark",
    )
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--seed", type=int, default=0, help="draws the plans and the inputs")
    p.add_argument(
        "--first",
        type=int,
        default=1,
        help="number of the first iteration (re-run one: --first N --iterations 1 with the same seed)",
    )
    p.add_argument(
        "--only",
        type=lambda t: [int(n) for n in t.split(",")],
        help="run just these iterations (comma-separated numbers) of --seed, instead of --first/--iterations",
    )
    p.add_argument(
        "--iteration-timeout",
        type=float,
        default=300.0,
        help="seconds an iteration (all its runs) may take; then it is a hang, its processes killed",
    )
    p.add_argument("--jobs", type=lambda t: name_list(t, tuple(JOBS)), default=list(JOBS), help="default: cm2,lr2,q20")
    p.add_argument(
        "--scenarios",
        type=lambda t: name_list(t, SCENARIOS),
        default=list(SCENARIOS),
        help=f"drawn among per iteration; default: {','.join(SCENARIOS)}",
    )
    p.add_argument(
        "--processes",
        type=lambda t: [int(n) for n in t.split(",")],
        default=list(PROCESSES),
        help="spark.misa.state.processes drawn among per iteration (2: worker kills too); default: 1,2",
    )
    p.add_argument(
        "--placements",
        type=lambda t: name_list(t, PLACEMENTS),
        default=list(PLACEMENTS),
        help="spark.misa.state.placement drawn among per iteration (executors: on a local cluster of two executors, "
        "executor kills too); default: driver,executors",
    )
    p.add_argument(
        "--standby-replicas",
        type=lambda t: [int(n) for n in t.split(",")],
        default=list(STANDBY_REPLICAS),
        help="spark.misa.state.standbyReplicas drawn among per iteration with the state on the executors (a "
        "standby host of each partition on the other executor); default: 0,1",
    )
    p.add_argument(
        "--sources",
        type=lambda t: name_list(t, SOURCES),
        default=list(SOURCES),
        help="drawn among per iteration: the job's files, or the same records on a topic of a Kafka broker the soak "
        "starts (make kafka-jars); default: files,kafka",
    )
    p.add_argument(
        "--modes", type=lambda t: name_list(t, MODES), default=list(MODES), help=f"default: {','.join(MODES)}"
    )
    p.add_argument(
        "--dfs",
        type=lambda t: name_list(t, DFS_KINDS),
        default=list(DFS_KINDS),
        help="file (under the run's folder) and/or s3 (moto's server on loopback); default: file,s3",
    )
    p.add_argument(
        "--work",
        type=Path,
        default=Path("soak-out"),
        help="inputs, references and runs (a failed run's folder is kept)",
    )
    p.add_argument("--out", type=Path, help="JSON line per iteration, then the summary (default: WORK/soak.jsonl)")
    p.add_argument("--keep-runs", action="store_true", help="keep every run's folder, not only failed ones")
    p.add_argument(
        "--no-cds",
        dest="cds",
        action="store_false",
        help="no JVM class data sharing archive (WORK/spark.jsa, written by the first run, ~175 MB)",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark conf for every run, over the soak's defaults",
    )
    p.set_defaults(func=run)
