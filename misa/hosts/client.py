"""The driver's side of the state hosts: the same requests as :class:`misa.parallel.pool.WorkerPool`, over Flight.

Requests go to every host at once, each on a thread of its own; while they run, the driver checks every host that
has not answered with a ``ping`` (answered at once, also during a long request), so a host that is gone fails the
batch at once and one that hangs (alive, not answering) within ``spark.misa.state.livenessTimeout``, naming it. Either
breaks the pool until :meth:`HostPool.restart`, like a dead worker process.
"""

from __future__ import annotations

import pickle
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from typing import Any, NoReturn, Sequence

import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql import DataFrame, SparkSession

from misa.config import MisaConfig
from misa.exceptions import StateWorkerError
from misa.hosts.host_task import HostAddress
from misa.hosts.launch import HostGroup
from misa.hosts.output import HostRows
from misa.hosts.send import KeysOf, Sent, send_frame
from misa.hosts.server import PING, REQUEST, Inbox, Output, call_options, stream_path
from misa.parallel.routing import partition_of_rows, split
from misa.parallel.worker import CLOSE

_DRIVER = -1  # the Spark partition the driver's own sendings are filed under


def _in_thread(call: Any, *args: Any) -> Future:
    """``call(*args)`` on a daemon thread (a call to a hung host must never hold the driver's exit)."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(call(*args))
        except BaseException as exc:  # noqa: BLE001 - the caller's
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True, name="misa-host-call").start()
    return future


class HostPool:
    """One state host per partition on Spark's executors, each with a copy of the (pickled) operator."""

    def __init__(self, spark: SparkSession, config: MisaConfig, dfs_urls: Sequence[str], operator: bytes):
        self.config = config
        self.group = HostGroup(spark, config, operator, list(dfs_urls))
        self.locations = [(f"the state host of partition {i}", url) for i, url in enumerate(dfs_urls)]
        self.addresses: list[HostAddress] = []
        self._clients: list[flight.FlightClient] = []
        self._broken: StateWorkerError | None = None
        self._lock = threading.Lock()  # one request at a time: the batch's thread and the mirror's both ask
        self._start()

    def __len__(self) -> int:
        return len(self.locations)

    def _start(self) -> None:
        self.addresses = self.group.start()
        self._clients = [flight.FlightClient(a.location) for a in self.addresses]

    # ------------------------------------------------------------------ requests
    def ask(self, name: str, *args: Any) -> list[Any]:
        """Every host's reply to request ``name`` with ``args``."""
        return self.ask_each(name, [args] * len(self))

    def ask_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Every host's reply to request ``name``, host i with ``args[i]``; the first error a host sent back is
        raised once every reply is in."""
        with self._lock:
            if self._broken is not None:
                raise self._broken
            body = [pickle.dumps((name, a)) for a in args]
            calls = [_in_thread(self._request, i, body[i]) for i in range(len(self))]
            replies = self._wait(calls, name)
        for index, (status, value) in enumerate(replies):
            if status == "error":
                value.add_note(f"(in {self._named(index)})")
                raise value
        return [value for _, value in replies]

    def _request(self, index: int, body: bytes) -> tuple[str, Any]:
        results = list(self._clients[index].do_action(flight.Action(REQUEST, body), call_options(self.group.key)))
        return pickle.loads(results[0].body.to_pybytes())

    def _wait(self, calls: list[Future], name: str) -> list[tuple[str, Any]]:
        """The calls' results; a host whose call failed, or that does not answer a ping in time, breaks the pool."""
        timeout = self.config.state_liveness_timeout_s
        while True:
            wait(calls, timeout=min(5.0, timeout / 2), return_when=FIRST_EXCEPTION)
            for index, call in enumerate(calls):
                if call.done() and call.exception() is not None:
                    self._lost(index, name, f"its connection failed ({_first_line(call.exception())})")
            if all(call.done() for call in calls):
                return [call.result() for call in calls]
            self._check_alive([i for i, call in enumerate(calls) if not call.done()], name, timeout)

    def _check_alive(self, waiting: list[int], name: str, timeout: float) -> None:
        """Ping the hosts still answering; one that does not answer within ``timeout`` seconds breaks the pool."""
        options = call_options(self.group.key, timeout)
        pings = {i: _in_thread(self._ping, i, options) for i in waiting}
        for index, ping in pings.items():
            try:
                ping.result(timeout + 5.0)
            except Exception as exc:  # noqa: BLE001 - any failure to answer
                self._lost(
                    index,
                    name,
                    f"it did not answer a liveness check within {timeout:g} s (spark.misa.state.livenessTimeout): "
                    f"hung, stopped or gone ({_first_line(exc)})",
                )

    def _ping(self, index: int, options: flight.FlightCallOptions) -> None:
        list(self._clients[index].do_action(flight.Action(PING, b""), options))

    def _named(self, index: int) -> str:
        a = self.addresses[index]
        return f"the state host of partition {index} (executor {a.host}, pid {a.pid}, {a.location})"

    def _lost(self, index: int, name: str, why: str) -> NoReturn:
        self._broken = StateWorkerError(
            f"{self._named(index)} failed while answering {name!r}: {why}. The batch fails. Restart the query: every "
            f"partition recovers from the newest version all of them made durable."
        )
        raise self._broken

    # ------------------------------------------------------------------ tables
    def route(self, deltas: pa.Table | DataFrame, keys_of: KeysOf) -> tuple[list[Any], int]:
        """Each host's reference to its part of ``deltas`` and the rows: a DataFrame's rows go from Spark's tasks
        to the hosts (:func:`~misa.hosts.send.send_frame`), a table's from the driver."""
        if self._broken is not None:
            raise self._broken
        if isinstance(deltas, DataFrame):
            sent = self.send(deltas, keys_of)
            return sent.inboxes, sent.rows
        partition = partition_of_rows(keys_of(deltas), deltas.num_rows, len(self))
        token = f"driver-{time.monotonic_ns()}"
        for index, part in enumerate(split(deltas, partition, len(self))):
            descriptor = flight.FlightDescriptor.for_path(*stream_path(token, _DRIVER, 0))
            writer, _ = self._clients[index].do_put(descriptor, deltas.schema, call_options(self.group.key))
            writer.write_table(part)
            writer.close()
        schema = deltas.schema.serialize().to_pybytes()
        return [Inbox(token, ((_DRIVER, 0),), schema) for _ in range(len(self))], deltas.num_rows

    def send(self, frame: DataFrame, keys_of: KeysOf, latest_of: str | None = None) -> Sent:
        """``frame``'s rows from Spark's tasks to their hosts (:func:`~misa.hosts.send.send_frame`), once every host
        answered a ping: a host that is gone fails the batch at once, not through Spark's retries of every task that
        cannot reach it (``spark.task.maxFailures`` attempts each; 15 to 20 s measured after an executor's loss)."""
        if self._broken is not None:
            raise self._broken
        self._check_alive(list(range(len(self))), "the batch's rows", self.config.state_liveness_timeout_s)
        return send_frame(frame, [a.location for a in self.addresses], self.group.key, keys_of, latest_of)

    def gather(self, outputs: Sequence[Output]) -> HostRows:
        """The output rows the hosts left, where they are."""
        return HostRows(tuple(a.location for a in self.addresses), tuple(outputs), self.group.key)

    def discard(self, refs: Sequence[Inbox]) -> None:
        """Drop a sending the hosts never took (its batch failed first)."""
        if self._broken is None and refs:
            self.ask("drop", refs[0].token)

    # ------------------------------------------------------------------ life
    def restart(self) -> None:
        """Stop every host (without waiting for its commits) and start new ones."""
        self._stop(cancel=True)
        self._broken = None
        self._start()

    def close(self) -> None:
        """Ask every host to close (each raises a commit failure nobody has seen); the hosts' job then ends (it is
        cancelled if a host could not be asked)."""
        closed = False
        try:
            if self._broken is None:
                self.ask(CLOSE)
                closed = True
        finally:
            self._stop(cancel=not closed)

    def _stop(self, cancel: bool = True) -> None:
        for client in self._clients:
            client.close()
        self._clients = []
        if cancel:
            self.group.cancel()
        else:
            self.group.join()


def _first_line(exc: BaseException | None) -> str:
    return str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else type(exc).__name__
