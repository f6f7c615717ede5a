"""The processes of a benchmark's ``spark-submit`` (its own process group): who is in it, and killing the whole job
or one executor JVM of its local cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Sequence

EXECUTOR = b"CoarseGrainedExecutorBackend"  # an executor JVM's command line


def kill(process: subprocess.Popen) -> float:
    """SIGKILL the job's process group (the JVM, the Python driver, its workers) and wait until all are gone;
    when the signal was sent."""
    killed = time.time()
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 30
    while group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return killed


def kill_executor(process: subprocess.Popen, hosts: Sequence[int] = ()) -> float:
    """SIGKILL an executor JVM in the job's process group (a local cluster's): the one running the last of the state
    hosts ``hosts`` (pids), else the oldest (a replacement for an executor killed before holds no state: Spark's
    store keeps its partitions where they were loaded); wait until it is gone; when the signal was sent."""
    executors = [pid for pid in group_members(process.pid) if EXECUTOR in _cmdline(pid)]
    if not executors:
        raise RuntimeError("no executor JVM in the job's process group: is --master a local-cluster?")
    holding = [pid for pid in executors if any(pid in _ancestors(host) for host in hosts)]
    victim = max(holding) if holding else min(executors)
    killed = time.time()
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while victim in group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return killed


def _ancestors(pid: int) -> list[int]:
    """``pid``'s parent, its parent, and so on (none once a process has ended)."""
    chain = []
    while pid > 1:
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
        chain.append(pid)
    return chain


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it ended
        return b""


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(int(entry.name))
    return members
