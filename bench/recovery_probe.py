"""The spark-submit entry of ``misa bench recovery``: runs a job script unchanged and timestamps its start.

    spark-submit bench/recovery_probe.py EVENTS SCRIPT [the job's arguments]

Appends one JSON line per event to EVENTS (wall-clock seconds, ``time.time()``): ``python`` (this
process started, before any import), ``session`` (``start``/``end`` of creating the Spark session),
``claim`` (the runtime claiming its state for the query, in runtimes that do), ``reconcile`` (the
runtime's recovery), ``load`` (the runtime replacing its state by a version: ``restore``, from the
local copy or the DFS, then opening every shard's RocksDB; with key partitions every partition's, in its
process or state host), ``restore`` (its part that materializes the version, with ``source`` local or dfs;
in the driver's own process only), ``hosts`` (state hosts started on the executors, with their ``pids``),
``failover`` (a lost host's partition moved to a new host that caught up, with every host's ``pids`` after it),
``query`` (the call that starts the streaming query) and ``progress`` (Spark's progress of each batch, with
its state operators' metrics, as the listener receives it). It only wraps the functions it times.
"""

from __future__ import annotations

import time

STARTED = time.time()

import functools  # noqa: E402  (after the start time, which is the point of this module)
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
from typing import Any, Callable  # noqa: E402


class EventLog:
    """Appends events to a file, one whole line per write (the process may be killed at any time)."""

    def __init__(self, path: str):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: str, **fields: Any) -> None:
        """Append ``{"event": event, "pid": ..., **fields}`` as one line."""
        line = json.dumps({"event": event, "pid": os.getpid(), **fields}, default=str) + "\n"
        os.write(self.fd, line.encode())


def timed(log: EventLog, event: str, fn: Callable, details: Callable[[tuple, Any], dict] | None = None) -> Callable:
    """``fn`` that logs ``event`` with its start and end (and ``details(args, result)``) on every call."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        result = fn(*args, **kwargs)
        log.write(event, start=start, end=time.time(), **(details(args, result) if details else {}))
        return result

    return wrapper


def progress_listener(log: EventLog) -> Any:
    """A streaming query listener that logs when the query started and each batch's progress."""
    from misa.obs.progress_listener import JsonProgressListener

    class _Probe(JsonProgressListener):
        def onQueryStarted(self, event: Any) -> None:
            log.write("query_started", at=time.time())

        def onQueryProgress(self, event: Any) -> None:
            progress = json.loads(event.progress.json)
            log.write("progress", at=time.time(), batch_id=progress["batchId"], progress=progress)

    return _Probe()


def instrument(log: EventLog) -> None:
    """Wrap the session, the runtime's recovery steps and the query start with timestamps."""
    from pyspark.sql.streaming import DataStreamWriter

    import jobs.submit
    import misa.job
    from checkpoint.checkpoints import CheckpointStore
    from misa.hosts.client import HostPool
    from misa.parallel.partitioned import PartitionedStore
    from misa.state.store import StateStore

    session = timed(log, "session", jobs.submit.spark_session)

    def spark_session(app_name: str) -> Any:
        spark = session(app_name)
        spark.streams.addListener(progress_listener(log))
        return spark

    jobs.submit.spark_session = spark_session
    misa.job.reconcile = timed(log, "reconcile", misa.job.reconcile, lambda a, r: {"version": r})
    if hasattr(StateStore, "claim"):
        StateStore.claim = timed(log, "claim", StateStore.claim)
    StateStore.load = timed(log, "load", StateStore.load, lambda a, r: {"version": a[1]})
    # key partitions (worker processes, state hosts): the load of every partition, restore included; the hosts' pids
    PartitionedStore.load = timed(log, "load", PartitionedStore.load, lambda a, r: {"version": a[1]})
    pids = lambda a, r: {"pids": [h.pid for h in a[0].addresses]}  # noqa: E731 - the hosts' processes after the call
    HostPool._start = timed(log, "hosts", HostPool._start, pids)
    HostPool._fail_over = timed(log, "failover", HostPool._fail_over, pids)
    CheckpointStore.restore = timed(log, "restore", CheckpointStore.restore, lambda a, r: {"source": r.source})
    DataStreamWriter.start = timed(log, "query", DataStreamWriter.start)


def main(argv: list[str]) -> None:
    """``EVENTS SCRIPT ARGS...``: run ``SCRIPT`` as ``__main__`` with ``ARGS``, logging to ``EVENTS``."""
    events, script, *args = argv
    log = EventLog(events)
    log.write("python", at=STARTED)
    instrument(log)
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
