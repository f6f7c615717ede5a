"""The driver's state worker processes: started with ``spawn``, asked over pipes, watched for crashes.

A worker runs misa's code only, never the user's main script: spawn would run the script again in each child (as
``__mp_main__``), and a script without ``if __name__ == "__main__":`` would start Spark there, then its own
workers, which spawn refuses in a child still starting. So the workers are started while spawn sees a main module
without a file, as in an interactive session (:func:`_main_script_hidden`), and what they get from the script, a
processor class, travels by value (:func:`worker_copy`), as Spark ships a processor to its Python workers.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import sys
import threading
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Iterator, NoReturn, Protocol, Sequence

import pyarrow as pa
from pyspark import cloudpickle

from misa.config import MisaConfig
from misa.exceptions import StateWorkerError
from misa.parallel.routing import concatenated, partition_of_rows, split
from misa.parallel.shared_arrow import SharedTable, discard, share, take
from misa.parallel.worker import CLOSE, PING, serve

log = logging.getLogger(__name__)
_POLL_S = 0.2
_CHECK_EVERY_S = 5.0  # a worker slow to answer is pinged this often (or at half the liveness timeout)
_CLOSE_S = 30.0
_STARTING = "start"
_MAIN_SWAP = threading.Lock()  # one pool's workers start at a time: each swaps the main module


def worker_copy(value: Any) -> bytes:
    """``value`` pickled for the workers: what the user's script defines goes by value (the workers never import
    the script), anything else by reference."""
    return cloudpickle.dumps(value)


@contextmanager
def _main_script_hidden() -> Iterator[None]:
    """While processes start in this block, spawn sees an empty main module, so their children import no main
    script (``sys.modules``' entry is swapped, not the script's globals, which its threads may be using)."""
    with _MAIN_SWAP:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main


class StatePool(Protocol):
    """The partitions' processes as the driver asks them: :class:`WorkerPool` (the driver's machine) or
    :class:`misa.hosts.client.HostPool` (Spark's executors)."""

    locations: list[tuple[str, str]]

    def __len__(self) -> int: ...

    def ask(self, name: str, *args: Any) -> list[Any]: ...

    def ask_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]: ...

    def route(self, deltas: Any, keys_of: Callable[[pa.Table], Sequence[Any]]) -> tuple[list[Any], int]: ...

    def gather(self, outputs: Sequence[Any]) -> Any: ...

    def discard(self, refs: Sequence[Any]) -> None: ...

    def restart(self) -> None: ...

    def close(self) -> None: ...


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    conn: Connection
    liveness: Connection  # answered by a thread of the worker's own, also while a request runs
    pid: int | None = None


class WorkerPool:
    """One worker process per partition location, each with a copy of the (pickled) operator; :meth:`ask` sends a
    request to every worker and gathers the replies. A worker that dies fails the request (and every later one,
    until :meth:`restart`)."""

    def __init__(self, config: MisaConfig, locations: Sequence[tuple[str, str]], operator: bytes):
        self.config = config
        self.operator = operator  # pickled: each worker's copy of the operator
        self.locations = list(locations)
        self._context = multiprocessing.get_context("spawn")  # no fork of a process that runs a JVM gateway
        self._workers: list[_Worker] = []
        self._broken: StateWorkerError | None = None
        self._lock = threading.Lock()  # one request at a time: the batch's thread and the mirror's both ask
        self._start()

    def __len__(self) -> int:
        return len(self.locations)

    @property
    def pids(self) -> list[int | None]:
        """The workers' process ids."""
        return [w.pid for w in self._workers]

    def _start(self) -> None:
        try:
            with _main_script_hidden():
                for index, (state_dir, dfs_url) in enumerate(self.locations):
                    parent, child = self._context.Pipe()
                    alive_parent, alive_child = self._context.Pipe()
                    process = self._context.Process(
                        target=serve,
                        args=(child, alive_child, index, self.config, state_dir, dfs_url, self.operator),
                        name=f"misa-state-worker-{index}",
                        daemon=True,
                    )
                    process.start()
                    child.close()
                    alive_child.close()
                    self._workers.append(_Worker(index, process, parent, alive_parent))
            pids = self._gather(_STARTING)
        except BaseException:
            self._stop(graceful=False)
            raise
        for worker, pid in zip(self._workers, pids):
            worker.pid = pid

    def ask(self, name: str, *args: Any) -> list[Any]:
        """Every worker's reply to request ``name`` with ``args``."""
        return self.ask_each(name, [args] * len(self._workers))

    def ask_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Every worker's reply to request ``name``, worker i with ``args[i]``."""
        with self._lock:
            if self._broken is not None:
                raise self._broken
            for worker, its_args in zip(self._workers, args):
                try:
                    worker.conn.send((name, its_args))
                except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
                    self._crashed(worker, name)
            return self._gather(name)

    def _gather(self, name: str) -> list[Any]:
        """The replies to ``name`` in worker order; the first error a worker sent back is raised (after every reply
        is in, so no reply is left in a pipe)."""
        replies = [self._reply(worker, name) for worker in self._workers]
        for worker, (status, value) in zip(self._workers, replies):
            if status == "error":
                value.add_note(f"(in state worker {worker.index}, {self.locations[worker.index][0]})")
                raise value
        return [value for _, value in replies]

    def _reply(self, worker: _Worker, name: str) -> tuple[str, Any]:
        timeout = self.config.state_liveness_timeout_s
        next_check = time.monotonic() + min(_CHECK_EVERY_S, timeout / 2)
        while not worker.conn.poll(_POLL_S):
            if not worker.process.is_alive():
                self._crashed(worker, name)
            if time.monotonic() >= next_check and name != _STARTING:  # starting, it imports before it answers pings
                self._check_alive(worker, name, timeout)
                next_check = time.monotonic() + min(_CHECK_EVERY_S, timeout / 2)
        try:
            return worker.conn.recv()
        except (EOFError, ConnectionResetError, OSError):
            worker.process.join(1.0)
            self._crashed(worker, name)

    def _check_alive(self, worker: _Worker, name: str, timeout: float) -> None:
        """Ping a worker that has not answered yet; one that does not answer the ping in ``timeout`` seconds (hung or
        stopped) breaks the pool."""
        try:
            worker.liveness.send(PING)
            if worker.liveness.poll(timeout):
                worker.liveness.recv()
                return
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            worker.process.join(1.0)
            self._crashed(worker, name)
        self._broken = StateWorkerError(
            f"state worker {worker.index} (pid {worker.process.pid}, partition {self.locations[worker.index][0]}) did "
            f"not answer a liveness check within {timeout:g} s (spark.misa.state.livenessTimeout) while answering "
            f"{name!r}: hung or stopped. The batch fails. Restart the query: every partition recovers from the newest "
            f"version all of them made durable."
        )
        raise self._broken

    def _crashed(self, worker: _Worker, name: str) -> NoReturn:
        code = worker.process.exitcode
        how = f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited ({code})"
        died = (
            f"state worker {worker.index} (pid {worker.process.pid}, partition {self.locations[worker.index][0]}) {how}"
        )
        self._broken = StateWorkerError(
            f"{died} while starting, before it could report an error (its output is above, on stderr): the state "
            f"workers cannot start, and a restart of the query would fail the same way"
            if name == _STARTING
            else f"{died} while answering {name!r}: the batch fails. Restart the query: every partition recovers from "
            f"the newest version all of them made durable."
        )
        raise self._broken

    def route(self, deltas: pa.Table, keys_of: Callable[[pa.Table], Sequence[Any]]) -> tuple[list[SharedTable], int]:
        """Each worker's part of ``deltas`` (split by the key columns ``keys_of`` gives) in shared memory, and the
        rows."""
        partition = partition_of_rows(keys_of(deltas), deltas.num_rows, len(self))
        return [share(part) for part in split(deltas, partition, len(self))], deltas.num_rows

    def gather(self, outputs: Sequence[SharedTable]) -> pa.Table:
        """The output tables the workers left in shared memory, as one."""
        return concatenated([take(o) for o in outputs])

    def discard(self, refs: Sequence[SharedTable]) -> None:
        """Free parts the workers never took (their request failed first)."""
        for ref in refs:
            discard(ref)

    def restart(self) -> None:
        """Stop every worker (a live one without waiting for its commits) and start new ones."""
        self._stop(graceful=False)
        self._broken = None
        self._start()

    def close(self) -> None:
        """Ask every live worker to close (each raises a commit failure nobody has seen), then end them."""
        try:
            if self._broken is None:
                self.ask(CLOSE)
        finally:
            self._stop(graceful=True)

    def _stop(self, graceful: bool) -> None:
        """End every worker: killed at once unless ``graceful``; its pipe closed (a live worker then closes its state
        and exits); waited for, and killed after a grace period."""
        for worker in self._workers:
            if not graceful and worker.process.is_alive():
                worker.process.kill()
            worker.conn.close()
            worker.liveness.close()
        for worker in self._workers:
            worker.process.join(_CLOSE_S if graceful else 5.0)
            if worker.process.is_alive():
                log.warning("state worker %d did not end; killing it", worker.index)
                worker.process.kill()
                worker.process.join(5.0)
        self._workers = []
