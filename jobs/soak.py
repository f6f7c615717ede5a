"""``misa soak``: a randomized crash soak of the jobs on the MiSA runtime, compared with plain Spark.

Each iteration draws a job (cm2 or lr2), a commit mode, a DFS (``file://`` under the run's folder,
or a bucket on an S3 server on loopback, moto's, that the soak starts) and a kill plan: one or two
SIGKILLs in a row, each at a random hit of a random failpoint (``MISA_FAILPOINTS``) or of the whole
spark-submit process group after a random delay; then a run without kills that must finish. The
whole output (every row of every batch, :mod:`jobs.output_diff`) must equal the native reference's.

One small input per job is generated once per soak; its native reference and a clean run in misa
mode (which must equal the reference, and whose wall time bounds the random delays) come first.
Every run is its own spark-submit, one at a time, with Spark's checkpoint on local disk.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from checkpoint.failpoints import ENV_VAR, FAILPOINTS
from jobs.bench.queries import name_list
from jobs.cluster_monitoring import KEY_COLUMNS as CM_KEYS
from jobs.gen.cm import generate_cm
from jobs.gen.lr import generate_lr
from jobs.output_diff import Output, RowDiff, diff_rows, final_rows, read_output, without_batch_ids

ROOT = Path(__file__).resolve().parents[1]
FILES_PER_BATCH = 2
SHARDS = 2
MODES = ("misa", "sync", "async-ckpt")
DFS_KINDS = ("file", "s3")
TWICE = 0.3  # share of plans whose first restart is killed too
TIMED = 0.25  # share of kills at a random moment rather than at a failpoint
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


JOBS = {
    "cm2": SoakJob(
        "cluster_monitoring.py",
        "cm2",
        partial(generate_cm, rate=100, seconds=40, files_per_second=0.25, jobs=100, progress=False),
        CM_KEYS["cm2"],
    ),
    "lr2": SoakJob(
        "linear_road.py",
        "lr2",
        partial(generate_lr, rate=2, seconds=150, files_per_second=1 / 15, progress=False),
        None,
    ),
}


@dataclass(frozen=True)
class Kill:
    """A planned SIGKILL: at the ``hit``-th hit of failpoint ``point``, or (no point) of the whole
    spark-submit process group ``delay_s`` seconds after it started."""

    point: str | None = None
    hit: int = 0
    delay_s: float = 0.0

    @property
    def failpoints(self) -> str:
        """The ``MISA_FAILPOINTS`` value of the run."""
        return f"{self.point}=kill({self.hit})" if self.point else ""

    def __str__(self) -> str:
        return f"{self.point}#{self.hit}" if self.point else f"after {self.delay_s:.1f}s"


@dataclass(frozen=True)
class Plan:
    """What one iteration runs: the job, the commit mode, the DFS kind and the kills before the final run."""

    job: str
    mode: str
    dfs: str
    kills: tuple[Kill, ...]


def max_hits(point: str, versions: int) -> int:
    """About how often ``point`` is hit in a run over ``versions`` versions (kills are drawn up to this)."""
    if point.startswith(("recovery.", "replay.")):  # once per recovery or replay
        return 2
    if point == "dfs.get":  # only when a version is restored from the DFS: each file of each shard
        return 4 * SHARDS
    per_version = {"ckpt.after_local_checkpoint": SHARDS, "dfs.put": 4 * SHARDS}.get(point, 1)
    return per_version * versions


def sample_kill(rng: random.Random, versions: int, clean_s: float) -> Kill:
    """A kill at a random failpoint and hit, or of the process group after 20-100 % of a clean run."""
    if rng.random() < TIMED:
        return Kill(delay_s=round(rng.uniform(0.2, 1.0) * clean_s, 1))
    point = rng.choice(sorted(FAILPOINTS))
    return Kill(point, rng.randint(1, max_hits(point, versions)))


def sample_plan(
    rng: random.Random,
    jobs: Sequence[str],
    modes: Sequence[str],
    dfs_kinds: Sequence[str],
    versions: dict[str, int],
    clean_s: dict[str, float],
) -> Plan:
    """One iteration's plan; ``versions`` and ``clean_s``: per job, the batches of its input and a clean run's time."""
    job = rng.choice(list(jobs))
    mode, dfs = rng.choice(list(modes)), rng.choice(list(dfs_kinds))
    kills = tuple(sample_kill(rng, versions[job], clean_s[job]) for _ in range(2 if rng.random() < TWICE else 1))
    return Plan(job, mode, dfs, kills)


def iteration_rng(seed: int, index: int) -> random.Random:
    """The random source of iteration ``index`` alone, so one iteration can be re-run (``--first``)."""
    return random.Random(f"{seed}:{index}")


# ---------------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Attempt:
    """One spark-submit of an iteration: its planned kill, whether it fired, exit code (None: hung), time, log."""

    kill: str
    fired: bool
    exit: int | None
    seconds: float
    log: Path

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL every process of ``proc``'s group (spark-submit's JVM, the Python driver, Python workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_attempt(cmd: list[str], env: dict[str, str], log: Path, deadline: float, kill: Kill | None) -> Attempt:
    """Run ``cmd`` in its own process group until it exits, ``kill`` fires, or ``deadline`` (monotonic) passes."""
    started = time.monotonic()
    timed = kill is not None and kill.point is None
    until = min(deadline, started + kill.delay_s) if timed else deadline
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd,
            env={**env, ENV_VAR: kill.failpoints if kill else ""},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=max(0.0, until - time.monotonic()))
            stopped = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
            code, stopped = None, True
        _kill_group(proc)  # Python workers the driver's death left behind
    fired = stopped and timed and until < deadline
    if fired:
        code = -signal.SIGKILL
    elif kill is not None and kill.point:
        fired = f"failpoint {kill.point}: killing process" in log.read_text(errors="replace")
    return Attempt(str(kill) if kill else "-", fired, code, time.monotonic() - started, log)


@dataclass
class Record:
    """The outcome of one iteration (one JSON line of ``--out``)."""

    iteration: int
    seed: int
    job: str
    mode: str
    dfs: str
    plan: list[str]
    kills: list[str] = field(default_factory=list)  # the planned kills that fired
    attempts: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    result: str = "ok"  # ok | relayout | mismatch | hang | error
    lost: int = 0
    extra: int = 0
    doubled: int = 0
    detail: str = ""
    run_dir: str = ""

    def add(self, attempt: Attempt) -> None:
        self.attempts.append(
            {"kill": attempt.kill, "fired": attempt.fired, "exit": attempt.exit, "seconds": round(attempt.seconds, 1)}
        )
        if attempt.fired:
            self.kills.append(attempt.kill)

    def line(self, last: int) -> str:
        """The progress line: plan, the kills that fired, result and time."""
        result = {"ok": "ok", "relayout": "RELAYOUT", "hang": "HANG", "error": "ERROR"}.get(
            self.result, f"MISMATCH: lost {self.lost}, extra {self.extra} (doubled {self.doubled})"
        )
        return (
            f"[{self.iteration:4d}/{last}] {self.job} {self.mode:10} {self.dfs:4} kill {' + '.join(self.plan)}; "
            f"fired: {', '.join(self.kills) or 'none'} | {result} {self.seconds:.0f}s"
        )


def _failure(attempt: Attempt, final: bool) -> tuple[str, str] | None:
    """(result, detail) when ``attempt`` hung or failed on its own; None when it ended as planned."""
    if attempt.exit is None:
        return "hang", f"{attempt.log.name} still running at the iteration timeout\n{attempt.tail()}"
    if attempt.fired or attempt.exit == 0:
        return None
    what = "the final run" if final else f"the run with kill {attempt.kill}"
    return "error", f"{what} exited with {attempt.exit} ({attempt.log.name})\n{attempt.tail()}"


# ---------------------------------------------------------------------------------------------- judging

Layout = dict[int, tuple[str, ...]]  # batch id -> the input files it read (batches that read some)


def batch_layout(checkpoint: Path) -> Layout:
    """The input files each batch read, from Spark's checkpoint: ``offsets/<batch>`` ends with the file
    source's log offset, ``sources/0/<entry>`` lists the files of each entry of the file source's log."""
    entries: dict[int, list[str]] = {}
    for log in (checkpoint / "sources" / "0").iterdir():
        if not log.name.startswith("."):
            for line in log.read_text().splitlines()[1:]:
                record = json.loads(line)
                entries.setdefault(record["batchId"], []).append(Path(record["path"]).name)
    layout: Layout = {}
    previous = -1
    for batch in sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()):
        offset = json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1])["logOffset"]
        files = tuple(sorted(f for entry in range(previous + 1, offset + 1) for f in entries.get(entry, ())))
        if files:
            layout[batch] = files
        previous = offset
    return layout


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
    def of(cls, spec: SoakJob, run_dir: Path) -> Reference:
        return cls(read_output(run_dir / "out"), batch_layout(run_dir / "ckpt"), settled_rows(spec, run_dir / "out"))


def judge(spec: SoakJob, reference: Reference, run_dir: Path) -> tuple[str, RowDiff, str]:
    """(result, diff, detail) of a finished run against the reference.

    When every batch read the reference's files the whole output must be equal: ``ok`` or ``mismatch``.
    Otherwise (Spark re-planned batches after a crash, see the README) the result is ``relayout``, or
    ``mismatch`` when even the settled rows differ.
    """
    layout = batch_layout(run_dir / "ckpt")
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
        self.reference: dict[str, Reference] = {}
        self.clean_s: dict[str, float] = {}
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

    def _start_s3(self) -> None:
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise SystemExit(
                "misa soak: --dfs s3 needs moto's server (pip install 'moto[server]', in the test "
                "extra), or choose --dfs file"
            ) from exc
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # not a line per S3 request
        self.s3_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.s3_server.start()
        host, port = self.s3_server.get_host_and_port()
        self.env.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=f"http://{host}:{port}",
        )
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
        """Generate ``job``'s input, run its native reference and a clean misa run (which must equal it)."""
        spec = JOBS[job]
        data = self.inputs[job] = self.work / "input" / job
        stats = spec.generate(data, seed=self.args.seed)
        self.versions[job] = math.ceil(stats["files"] / FILES_PER_BATCH)
        native_dir = self.work / "reference" / job
        native = self._run_clean(job, "native", native_dir)
        reference = self.reference[job] = Reference.of(spec, native_dir)
        if not reference.output.size:
            raise SystemExit(f"misa soak: the native reference of {job} has no rows: the input is too small")
        clean_dir = self.work / "reference" / f"{job}-misa"
        clean = self._run_clean(job, "misa", clean_dir)
        self.clean_s[job] = clean.seconds
        result, _, detail = judge(spec, reference, clean_dir)
        print(
            f"{job}: {stats['records']} records in {stats['files']} files, {self.versions[job]} batches; native "
            f"reference {reference.output.size} rows ({native.seconds:.1f}s); clean misa run {result} "
            f"({clean.seconds:.1f}s)",
            flush=True,
        )
        if result != "ok":
            raise SystemExit(
                f"misa soak: a clean {job} run in misa mode differs from the native reference, so kills "
                f"cannot be judged:\n{detail}"
            )

    def _run_clean(self, job: str, mode: str, run_dir: Path) -> Attempt:
        run_dir.mkdir(parents=True)
        attempt = run_attempt(
            self.command(job, mode, run_dir, f"file://{run_dir / 'dfs'}"),
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

    def command(self, job: str, mode: str, run_dir: Path, dfs: str) -> list[str]:
        """The spark-submit command line of ``job`` in ``mode`` writing under ``run_dir``."""
        spec = JOBS[job]
        cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
        for key, value in {**self.conf, "spark.driver.extraJavaOptions": self.java_options()}.items():
            cmd += ["--conf", f"{key}={value}"]
        return cmd + [
            str(ROOT / "jobs" / spec.script),
            "--query",
            spec.query,
            "--mode",
            mode,
            "--input",
            str(self.inputs[job]),
            "--output",
            str(run_dir / "out"),
            "--checkpoint",
            str(run_dir / "ckpt"),
            "--dfs",
            dfs,
            "--available-now",
            "--max-files-per-trigger",
            str(FILES_PER_BATCH),
            "--watermark-delay",
            "5s",
            "--quiet",
        ]

    # ------------------------------------------------------------------ iterations
    def iteration(self, index: int, plan: Plan) -> Record:
        """Run ``plan``'s kills, then the final run, and compare the output with the reference."""
        run_dir = self.work / "runs" / f"{index:04d}"
        run_dir.mkdir()
        dfs = f"file://{run_dir / 'dfs'}" if plan.dfs == "file" else f"s3://{BUCKET}/{index:04d}"
        cmd = self.command(plan.job, plan.mode, run_dir, dfs)
        record = Record(
            index, self.args.seed, plan.job, plan.mode, plan.dfs, [str(k) for k in plan.kills], run_dir=str(run_dir)
        )
        started = time.monotonic()
        deadline = started + self.args.iteration_timeout
        runs: list[Kill | None] = [*plan.kills, None]
        for number, kill in enumerate(runs, 1):
            attempt = run_attempt(cmd, self.env, run_dir / f"run-{number}.log", deadline, kill)
            record.add(attempt)
            failure = _failure(attempt, final=kill is None)
            if failure:
                record.result, record.detail = failure
                break
        else:
            record.result, diff, record.detail = judge(JOBS[plan.job], self.reference[plan.job], run_dir)
            record.lost, record.extra, record.doubled = diff.lost, diff.extra_rows, diff.doubled
        record.seconds = round(time.monotonic() - started, 1)
        if record.result == "ok" and not self.args.keep_runs:
            self._remove(run_dir, f"{index:04d}/" if plan.dfs == "s3" else None)
        return record

    def _remove(self, run_dir: Path, s3_prefix: str | None) -> None:
        """Delete a passed iteration's folder and its objects in the bucket."""
        shutil.rmtree(run_dir, ignore_errors=True)
        if s3_prefix:
            s3 = self._s3()
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=s3_prefix):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


def summarize(records: Sequence[Record]) -> dict:
    """Totals over the iterations: results, kills that fired per point, lost and doubled rows, failures."""
    fired = Counter(k.split("#")[0] if "#" in k else "timed" for r in records for k in r.kills)
    return {
        "iterations": len(records),
        "results": dict(Counter(r.result for r in records)),
        "no_kill_iterations": sum(1 for r in records if not r.kills),
        "kills_by_point": dict(sorted(fired.items())),
        "lost_rows": sum(r.lost for r in records),
        "extra_rows": sum(r.extra for r in records),
        "doubled_rows": sum(r.doubled for r in records),
        "relayouts": sum(1 for r in records if r.result == "relayout"),
        "hangs": sum(1 for r in records if r.result == "hang"),
        "errors": sum(1 for r in records if r.result == "error"),
        "failed": [r.iteration for r in records if r.result != "ok"],
        "mean_iteration_s": round(sum(r.seconds for r in records) / max(1, len(records)), 1),
    }


def summary_text(summary: dict) -> str:
    kills = ", ".join(f"{point} {n}" for point, n in summary["kills_by_point"].items()) or "none"
    return "\n".join(
        [
            f"soak: {summary['iterations']} iterations ({summary['mean_iteration_s']}s each on average): "
            + ", ".join(f"{n} {result}" for result, n in summary["results"].items()),
            f"kills that fired: {kills}; iterations where no kill fired: {summary['no_kill_iterations']}",
            f"lost rows {summary['lost_rows']}, extra rows {summary['extra_rows']} "
            f"(doubled {summary['doubled_rows']}), "
            f"relayouts {summary['relayouts']}, hangs {summary['hangs']}, errors {summary['errors']}",
            f"failed iterations: {summary['failed'] or 'none'}",
        ]
    )


def iterations(args: argparse.Namespace, soak: Soak) -> Iterator[tuple[int, Plan]]:
    """Each iteration's number and plan."""
    for index in range(args.first, args.first + args.iterations):
        yield (
            index,
            sample_plan(iteration_rng(args.seed, index), args.jobs, args.modes, args.dfs, soak.versions, soak.clean_s),
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
                print(record.line(args.first + args.iterations - 1), flush=True)
                if record.result != "ok":
                    print("    " + record.detail.replace("\n", "\n    "), flush=True)
                lines.write(json.dumps(asdict(record)) + "\n")
                lines.flush()
            summary = summarize(records)
            lines.write(json.dumps({"summary": summary}) + "\n")
    print(summary_text(summary))
    return 0 if not summary["failed"] else 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("soak", help="randomized crash soak: kill the jobs anywhere, compare with plain Spark")
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--seed", type=int, default=0, help="draws the plans and the inputs")
    p.add_argument(
        "--first",
        type=int,
        default=1,
        help="number of the first iteration (re-run one: --first N --iterations 1 with the same seed)",
    )
    p.add_argument(
        "--iteration-timeout",
        type=float,
        default=300.0,
        help="seconds an iteration (all its runs) may take; then it is a hang, its processes killed",
    )
    p.add_argument("--jobs", type=lambda t: name_list(t, tuple(JOBS)), default=list(JOBS), help="default: cm2,lr2")
    p.add_argument(
        "--modes", type=lambda t: name_list(t, MODES), default=list(MODES), help="default: misa,sync,async-ckpt"
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
