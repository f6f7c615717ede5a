"""Named failpoints for failure injection, off unless ``MISA_FAILPOINTS`` enables them.

The environment variable holds ``name=action`` pairs separated by ``;``::

    MISA_FAILPOINTS="ckpt.after_upload=kill;dfs.put=raise(3)"

Actions: ``raise`` (every time), ``raise(N)`` (the first N times), ``sleep(MS)``
(sleep MS milliseconds, then go on), ``kill`` (SIGKILL this process: a crash,
no cleanup), ``kill(N)`` (SIGKILL at the N-th hit), ``killexecutor`` and ``killexecutor(N)`` (SIGKILL the Spark
executor JVM this process runs under, a state host's, then this process: an executor lost at that point, its
processes gone together as a container's are; a host its dead JVM leaves running is ``stop``'s case),
``decommission(N)`` (SIGPWR to that executor JVM at the N-th hit: Spark decommissions it, as on a node drain or a
spot reclaim, with ``spark.decommission.enabled``), ``stop(N)`` (SIGSTOP this process at the N-th hit: a hung
process) and ``off``.
Code marks a point with :func:`hit`; an unknown name in the variable fails at the first hit with the list of known
names.

With ``MISA_FAILPOINTS_ONCE`` naming a folder, a ``kill``, ``killexecutor``, ``decommission`` or ``stop`` fires once
among every process that shares the folder (a state host started in place of a killed one counts its hits from 0
and would fire again).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass

from .errors import FailpointError

ENV_VAR = "MISA_FAILPOINTS"
LOG_VAR = "MISA_FAILPOINTS_LOG"
ONCE_VAR = "MISA_FAILPOINTS_ONCE"

#: Every failpoint in the code base, with where it sits.
FAILPOINTS: dict[str, str] = {
    "commit.after_apply": "after a commit buffer is written to RocksDB, before the flush",
    "ckpt.before_flush": "before the memtables of a version are flushed",
    "ckpt.after_flush": "after the flush, before any RocksDB checkpoint is taken",
    "ckpt.after_local_checkpoint": "after one shard's RocksDB checkpoint directory is complete",
    "ckpt.after_local_manifest": "after every shard's local manifest is written, before the local marker",
    "ckpt.after_local_marker": "after the local commit marker of a version (ack 1)",
    "dfs.put": "before each file is written to the DFS (retried like a DFS error)",
    "ckpt.after_upload": "after every file of a version is on the DFS, before the manifests",
    "ckpt.after_manifest": "after every shard manifest is on the DFS, before the DFS marker",
    "ckpt.after_dfs_marker": "after the DFS commit marker of a version (ack 2)",
    "mirror.put": "before each file of Spark's checkpoint is written to its mirror (retried like a DFS error)",
    "mirror.after_copy": "after one group (sources, offsets, commits) of Spark's new log files is mirrored",
    "mirror.after_remove": "after one group of the log files Spark removed is removed from the mirror",
    "dfs.get": "before each file is read from the DFS during a restore (retried)",
    "gc.before_delete": "before retention GC deletes anything on the DFS",
    "gc.after_markers": "after retention GC removed expired DFS markers, before it deletes their files",
    "recovery.before_rollback": "in recovery, after the rollback target is found restorable, before newer markers go",
    "recovery.after_source_entry_trimmed": "in recovery, after each file-source log entry past C's offsets is trimmed",
    "recovery.after_offset_removed": "in recovery, after each of Spark's offsets entries past C is removed",
    "recovery.after_commit_removed": "in recovery, after Spark's commit entry of the in-flight batch C is removed",
    "replay.after_forget": "in a replay inside the running query, after the replayed version's markers are removed",
    "kafka_sink.before_commit": "in the Kafka sink, a batch's records sent in its transaction, before its commit",
    "kafka_sink.after_commit": "in the Kafka sink, after a batch's transaction committed, before the sink returns",
}


@dataclass
class _Action:
    kind: str  # raise | sleep | kill | killexecutor | decommission | stop | off
    arg: int | None = None
    hits: int = 0


_ACTION_RE = re.compile(r"^(raise|sleep|killexecutor|kill|decommission|stop|off)(?:\((\d+)\))?$")
_EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"
_lock = threading.Lock()
_actions: dict[str, _Action] | None = None


def parse(spec: str) -> dict[str, _Action]:
    """Parse a failpoint spec; raises ValueError naming the bad part and the expected form."""
    actions: dict[str, _Action] = {}
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        name, sep, action = part.partition("=")
        name, action = name.strip(), action.strip()
        if not sep or name not in FAILPOINTS:
            raise ValueError(
                f"{ENV_VAR}: unknown failpoint {name!r} in {part!r}; expected name=action with a name "
                f"from: {', '.join(sorted(FAILPOINTS))}"
            )
        match = _ACTION_RE.match(action)
        if not match or (match.group(1) in ("sleep", "stop") and match.group(2) is None):
            raise ValueError(
                f"{ENV_VAR}: bad action {action!r} for {name}; "
                "expected raise, raise(N), sleep(MS), kill, kill(N), killexecutor, killexecutor(N), decommission(N), "
                "stop(N) or off"
            )
        actions[name] = _Action(match.group(1), int(match.group(2)) if match.group(2) else None)
    return actions


def configure(spec: str | None) -> None:
    """Replace the active failpoints (``None`` re-reads the environment variable)."""
    global _actions
    with _lock:
        _actions = parse(os.environ.get(ENV_VAR, "") if spec is None else spec)


def hits(name: str) -> int:
    """How often an enabled failpoint has been reached since it was configured (0 when disabled)."""
    action = (_actions or {}).get(name)
    return action.hits if action else 0


def hit(name: str) -> None:
    """Mark failpoint ``name``; does nothing unless it is enabled."""
    if name not in FAILPOINTS:
        raise KeyError(f"failpoint {name!r} is not declared in common.failpoints.FAILPOINTS")
    if _actions is None:
        configure(None)
    assert _actions is not None
    action = _actions.get(name)
    if action is None or action.kind == "off":
        return
    with _lock:
        action.hits += 1
        hits = action.hits
    if action.kind == "raise" and (action.arg is None or hits <= action.arg):
        raise FailpointError(f"failpoint {name} triggered (hit {hits})")
    if action.kind == "sleep":
        time.sleep((action.arg or 0) / 1000.0)
    if action.kind in _PROCESS_ACTIONS and not _first_to_fire(name):
        return
    if action.kind == "kill" and (action.arg is None or hits == action.arg):
        _tell(f"failpoint {name}: killing process {os.getpid()} (hit {hits})")
        os.kill(os.getpid(), signal.SIGKILL)
    if action.kind == "killexecutor" and (action.arg is None or hits == action.arg):
        executor = executor_jvm()
        _tell(f"failpoint {name}: killing executor JVM {executor} (hit {hits})")
        os.kill(executor, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    if action.kind == "decommission" and hits == action.arg:
        executor = executor_jvm()
        _tell(f"failpoint {name}: decommissioning executor JVM {executor} (hit {hits})")
        os.kill(executor, signal.SIGPWR)
    if action.kind == "stop" and hits == action.arg:
        _tell(f"failpoint {name}: stopping process {os.getpid()} at {time.time():.3f} (hit {hits})")
        os.kill(os.getpid(), signal.SIGSTOP)


_PROCESS_ACTIONS = ("kill", "killexecutor", "decommission", "stop")


def _first_to_fire(name: str) -> bool:
    """Whether no process sharing ``MISA_FAILPOINTS_ONCE``'s folder fired ``name`` yet (always, without the
    variable); checked only where the action fires at this hit."""
    folder = os.environ.get(ONCE_VAR)
    if not folder:
        return True
    action = (_actions or {})[name]
    if action.arg is not None and action.hits != action.arg:
        return True  # not this hit: nothing fires
    try:
        os.close(os.open(os.path.join(folder, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _tell(message: str) -> None:
    """Say what a failpoint does, on stderr and, when ``MISA_FAILPOINTS_LOG`` names a file, in it too (a state
    host's stderr dies with its executor JVM)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    log = os.environ.get(LOG_VAR)
    if log:
        with open(log, "a") as f:
            f.write(message + "\n")


def executor_jvm() -> int:
    """The process id of the Spark executor JVM this process descends from (a failure when there is none)."""
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if _EXECUTOR_MAIN.encode() in f.read():
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise FailpointError(f"process {os.getpid()} does not run under a Spark executor ({_EXECUTOR_MAIN})")
