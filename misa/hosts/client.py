"""The driver's side of the state hosts: the same requests as :class:`misa.parallel.pool.WorkerPool`, over Flight,
and a lost host replaced without failing the batch.

Requests go to every host at once, each on a thread of its own; while they run, the driver checks every host that
has not answered with a ``ping`` (answered at once, also during a long request). A host that is gone, or that does
not answer within ``spark.misa.state.livenessTimeout``, is lost: its partition alone moves to a new host
(:meth:`~misa.hosts.launch.HostGroup.replacement`), which loads the partition's newest durable version and redoes the
requests since (:mod:`.journal`), then answers the request the lost one did not. The other hosts keep their stores,
caches and pending commits. More than ``spark.misa.state.hostMaxFailures`` losses of one partition in a batch break
the pool until :meth:`HostPool.restart`.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
import uuid
from concurrent.futures import Future, wait
from functools import partial
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.flight as flight
from pyspark.sql import DataFrame, SparkSession

from misa.config import MisaConfig
from misa.exceptions import StateWorkerError
from misa.hosts.host_task import HostAddress
from misa.hosts.journal import COMMIT, HostJournal, Request, Resend, renewed
from misa.hosts.launch import HostGroup
from misa.hosts.output import HostRows
from misa.hosts.send import KeysOf, Sent, send_frame
from misa.hosts.server import PING, REQUEST, Inbox, Output, call_options, stream_path
from misa.parallel.routing import partition_of_rows, split
from misa.parallel.worker import CLOSE
from misa.state.store import EMPTY_VERSION

log = logging.getLogger(__name__)
_DRIVER = -1  # the Spark partition the driver's own sendings are filed under
_OUTPUTS = ("apply", "no_data_batch")  # the requests whose replies leave a batch's output on the hosts


class HostLost(Exception):
    """Host ``index`` was lost (``why``) during a request."""

    def __init__(self, index: int, why: str):
        super().__init__(why)
        self.index = index
        self.why = why


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
        self.journal = HostJournal()
        self._clients: list[flight.FlightClient] = []
        self._outputs: list[Output | None] = []  # the newest batch's output on each host
        self._losses: dict[int, int] = {}  # losses of each partition since the last commit
        self._broken: StateWorkerError | None = None
        self._lock = threading.RLock()  # one request at a time: the batch's thread and the mirror's both ask
        self._start()

    def __len__(self) -> int:
        return len(self.locations)

    def _start(self) -> None:
        self.addresses = self.group.start()
        self._clients = [flight.FlightClient(a.location) for a in self.addresses]
        self._outputs = [None] * len(self)
        self.journal = HostJournal()

    # ------------------------------------------------------------------ requests
    def ask(self, name: str, *args: Any) -> list[Any]:
        """Every host's reply to request ``name`` with ``args``."""
        return self.ask_each(name, [args] * len(self))

    def ask_each(self, name: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Every host's reply to request ``name``, host i with ``args[i]`` (a lost host's partition answers from its
        new host); the first error a host sent back is raised once every reply is in."""
        with self._lock:
            self._check()
            request = self.journal.record(name, list(args))
            replies = self._ask_all(name, list(args), request)
            if name == "call" and args[0][:2] == ("controller", "wait_durable"):
                self.journal.durable(int(args[0][2]))
            if name == COMMIT:
                self._losses.clear()
        for index, (status, value) in enumerate(replies):
            if status == "error":
                value.add_note(f"(in {self._named(index)})")
                raise value
        return [value for _, value in replies]

    def _ask_all(self, name: str, args: list[tuple[Any, ...]], request: Request | None) -> list[tuple[str, Any]]:
        """Every host's reply; a lost host is replaced (caught up to ``request``) and asked again."""
        replies: list[tuple[str, Any]] = [("ok", None)] * len(self)
        pending = list(range(len(self)))
        while pending:
            calls = {i: _in_thread(self._request, i, pickle.dumps((name, args[i]))) for i in pending}
            lost = self._wait(calls, name, replies)
            for index, why in lost.items():
                self._fail_over(index, name, why, request)
                args[index] = renewed(args[index], partial(self._resend, index))
            pending = list(lost)
        if name in _OUTPUTS:
            self._outputs = [value.output if status == "ok" else None for status, value in replies]
        return replies

    def _request(self, index: int, body: bytes) -> tuple[str, Any]:
        results = list(self._clients[index].do_action(flight.Action(REQUEST, body), call_options(self.group.key)))
        return pickle.loads(results[0].body.to_pybytes())

    def _call(self, index: int, name: str, args: tuple[Any, ...]) -> Any:
        """Host ``index``'s reply to one request (a new host catching up): its error raised, its loss
        :class:`HostLost`."""
        call = _in_thread(self._request, index, pickle.dumps((name, args)))
        replies: list[tuple[str, Any]] = [("ok", None)] * len(self)
        lost = self._wait({index: call}, name, replies)
        if lost:
            raise HostLost(index, lost[index])
        status, value = replies[index]
        if status == "error":
            value.add_note(f"(in {self._named(index)}, catching up)")
            raise value
        return value

    def _wait(self, calls: dict[int, Future], name: str, replies: list[tuple[str, Any]]) -> dict[int, str]:
        """Wait for ``calls`` (their replies into ``replies``); the hosts whose call failed, or that did not answer a
        ping in time, and why."""
        timeout = self.config.state_liveness_timeout_s
        lost: dict[int, str] = {}
        while True:
            running = [c for i, c in calls.items() if i not in lost and not c.done()]
            wait(running, timeout=min(5.0, timeout / 2))
            for index, call in calls.items():
                if index in lost or not call.done():
                    continue
                if call.exception() is not None:
                    lost[index] = f"its connection failed ({_first_line(call.exception())})"
                else:
                    replies[index] = call.result()
            waiting = [i for i, c in calls.items() if i not in lost and not c.done()]
            if not waiting:
                return lost
            lost.update(self._unresponsive(waiting, timeout))

    def _unresponsive(self, indexes: Sequence[int], timeout: float) -> dict[int, str]:
        """The hosts among ``indexes`` that do not answer a ping within ``timeout`` seconds, and why."""
        options = call_options(self.group.key, timeout)
        pings = {i: _in_thread(self._ping, i, options) for i in indexes}
        lost = {}
        for index, ping in pings.items():
            try:
                ping.result(timeout + 5.0)
            except Exception as exc:  # noqa: BLE001 - any failure to answer
                lost[index] = (
                    f"it did not answer a liveness check within {timeout:g} s (spark.misa.state.livenessTimeout): "
                    f"hung, stopped or gone ({_first_line(exc)})"
                )
        return lost

    def _ping(self, index: int, options: flight.FlightCallOptions) -> None:
        list(self._clients[index].do_action(flight.Action(PING, b""), options))

    def _named(self, index: int) -> str:
        a = self.addresses[index]
        return f"the state host of partition {index} (executor {a.host}, pid {a.pid}, {a.location})"

    def _check(self) -> None:
        if self._broken is not None:
            raise self._broken

    # ------------------------------------------------------------------ failover
    def _fail_over(self, index: int, name: str, why: str, request: Request | None) -> None:
        """Replace lost host ``index`` by a new one caught up to ``request`` (None: every recorded request)."""
        while True:
            losses = self._losses[index] = self._losses.get(index, 0) + 1
            limit = self.config.state_host_max_failures
            if losses > limit:
                self._broken = StateWorkerError(
                    f"{self._named(index)} failed while answering {name!r}: {why}. Its partition was lost {losses} "
                    f"times in this batch (spark.misa.state.hostMaxFailures={limit}): the batch fails. Restart the "
                    f"query: every partition recovers from the newest version all of them made durable."
                )
                raise self._broken
            log.warning(
                "%s was lost while answering %r: %s; its partition moves to a new host", self._named(index), name, why
            )
            started = time.monotonic()
            try:
                address = self.group.replacement(self.addresses[index])
            except StateWorkerError as exc:
                self._broken = exc
                raise
            self.addresses[index] = address
            self._clients[index].close()
            self._clients[index] = flight.FlightClient(address.location)
            try:
                self._catch_up(index, request)
            except HostLost as again:
                name, why = "catching up", again.why
                continue
            log.warning(
                "partition %d moved to %s (pid %d) in %.1f s",
                index,
                address.location,
                address.pid,
                time.monotonic() - started,
            )
            return

    def _catch_up(self, index: int, request: Request | None) -> None:
        """Bring new host ``index`` to where the others stand before ``request``: the start's claim, the partition's
        newest durable version, then the recorded requests after it (their rows sent again)."""
        journal = self.journal
        if journal.claim is None:
            return  # not claimed yet: the start makes its requests again
        if journal.base is None:  # the start's recovery was running: its steps are not recorded to redo
            self._broken = StateWorkerError(
                f"the state host of partition {index} was lost while the start recovered the state: the start fails; "
                f"start the query again (its hosts start anew and recover every partition)"
            )
            raise self._broken
        self._call(index, "claim", journal.claim)
        durable = self._call(index, "call", ("checkpoints", "newest_durable"))
        loaded = EMPTY_VERSION if durable is None else int(durable)
        if loaded < journal.base:
            self._broken = StateWorkerError(
                f"partition {index}'s newest durable version is {loaded}, older than version {journal.base} which "
                f"every partition made durable: its DFS copy lost versions, so its new host cannot catch up"
            )
            raise self._broken
        self._call(index, "load", (loaded,))
        self._call(index, "adopt", (loaded,))
        for redo in journal.after(loaded, before=request):
            reply = self._call(index, redo.name, renewed(redo.args[index], partial(self._resend, index)))
            if redo.name in _OUTPUTS:
                self._outputs[index] = reply.output

    def _hand_over_leaving(self) -> None:
        """Move the partitions of hosts whose executor is decommissioning before it leaves: each host first makes its
        pending versions durable, so its new host starts from its last version (nothing to redo)."""
        leaving = self.group.decommissioning()
        for index, address in enumerate(self.addresses):
            if address.task_attempt in leaving:
                log.warning("%s runs on a decommissioning executor: its partition moves", self._named(index))
                self._call(index, "call", ("controller", "drain"))
                self._fail_over(index, "the hand-over", "its executor is decommissioning", None)

    def _resend(self, index: int, inbox: Inbox) -> Inbox:
        """The rows ``inbox`` named, sent again to host ``index`` alone; its new inbox."""
        resend = self.journal.sendings.get(inbox.token)
        if resend is None:
            raise StateWorkerError(f"the rows of sending {inbox.token} are no longer known: they cannot be sent again")
        if isinstance(resend.rows, DataFrame):
            locations = [a.location for a in self.addresses]
            sent = send_frame(resend.rows, locations, self.group.key, resend.keys_of, resend.latest_of, only=index)
            return sent.inboxes[index]
        return self._put_table(resend.rows, resend.keys_of, f"driver-{uuid.uuid4().hex}", only=index)[index]

    def recovered_rows(self) -> HostRows | None:
        """After a failure to read the batch's output: every lost host replaced (its output made again), and the
        output where it now is; None when no host was lost."""
        with self._lock:
            self._check()
            lost = self._unresponsive(range(len(self)), self.config.state_liveness_timeout_s)
            for index, why in lost.items():
                self._fail_over(index, "the batch's output", why, None)
        return self.gather(self._outputs) if lost else None  # type: ignore[arg-type]  # every host's is set

    # ------------------------------------------------------------------ tables
    def route(self, deltas: pa.Table | DataFrame, keys_of: KeysOf) -> tuple[list[Any], int]:
        """Each host's reference to its part of ``deltas`` and the rows: a DataFrame's rows go from Spark's tasks
        to the hosts (:func:`~misa.hosts.send.send_frame`), a table's from the driver."""
        if isinstance(deltas, DataFrame):
            sent = self.send(deltas, keys_of)
            return sent.inboxes, sent.rows
        inboxes = self._sending(lambda token: self._put_table(deltas, keys_of, token), Resend(deltas, keys_of))
        return inboxes, deltas.num_rows

    def _put_table(self, table: pa.Table, keys_of: KeysOf, token: str, only: int | None = None) -> list[Inbox]:
        """``table``'s rows from the driver to their hosts (``only``: that host's alone) under ``token``; each host's
        inbox."""
        partition = partition_of_rows(keys_of(table), table.num_rows, len(self))
        for index, part in enumerate(split(table, partition, len(self))):
            if only not in (None, index):
                continue
            descriptor = flight.FlightDescriptor.for_path(*stream_path(token, _DRIVER, 0))
            writer, _ = self._clients[index].do_put(descriptor, table.schema, call_options(self.group.key))
            writer.write_table(part)
            writer.close()
        schema = table.schema.serialize().to_pybytes()
        return [Inbox(token, ((_DRIVER, 0),), schema) for _ in range(len(self))]

    def send(self, frame: DataFrame, keys_of: KeysOf, latest_of: str | None = None) -> Sent:
        """``frame``'s rows from Spark's tasks to their hosts (:func:`~misa.hosts.send.send_frame`), once every host
        answered a ping: a host that is gone is replaced first, not found through Spark's retries of every task that
        cannot reach it (``spark.task.maxFailures`` attempts each)."""

        def attempt(token: str) -> list[Inbox]:
            locations = [a.location for a in self.addresses]
            done.append(send_frame(frame, locations, self.group.key, keys_of, latest_of, token=token))
            return done[-1].inboxes

        done: list[Sent] = []
        self._sending(attempt, Resend(frame, keys_of, latest_of))
        return done[-1]

    def _sending(self, attempt: Callable[[str], list[Inbox]], resend: Resend) -> list[Inbox]:
        """Run a sending once every host answers; a sending that fails while a host is lost is dropped by the others
        and made again once the host was replaced. Its rows are remembered for new hosts (:meth:`_resend`)."""
        lost: dict[int, str] | None = None
        while True:
            with self._lock:
                self._check()
                if lost is None:
                    self._hand_over_leaving()
                    lost = self._unresponsive(range(len(self)), self.config.state_liveness_timeout_s)
                for index, why in lost.items():
                    self._fail_over(index, "the batch's rows", why, None)
            token = uuid.uuid4().hex
            try:
                inboxes = attempt(token)
            except Exception:
                with self._lock:
                    lost = self._unresponsive(range(len(self)), self.config.state_liveness_timeout_s)
                    if not lost:
                        raise
                    self._drop_on_others(token, lost)
                log.warning("a sending failed while the host(s) of partition(s) %s were lost: made again", sorted(lost))
                continue
            self.journal.sent(token, resend)
            return inboxes

    def _drop_on_others(self, token: str, lost: dict[int, str]) -> None:
        """The hosts still answering forget a failed sending's streams."""
        for index in range(len(self)):
            if index not in lost:
                try:
                    self._call(index, "drop", (token,))
                except HostLost as gone:  # lost too: replaced with the others before the sending is made again
                    lost[index] = gone.why

    def gather(self, outputs: Sequence[Output]) -> HostRows:
        """The output rows the hosts left, where they are: ``outputs`` of the hosts' replies, but a new host's own
        (it made the batch's output again while catching up); with a way to find them again after a host's loss."""
        now = [mine or given for mine, given in zip(self._outputs, outputs)] if self._outputs else list(outputs)
        locations = tuple(a.location for a in self.addresses)
        driver_rows = self.config.state_host_output_driver_rows
        return HostRows(locations, tuple(now), self.group.key, self.recovered_rows, driver_rows)

    def discard(self, refs: Sequence[Inbox]) -> None:
        """Drop a sending the hosts never took (its batch failed first)."""
        if self._broken is None and refs:
            self.ask("drop", refs[0].token)

    # ------------------------------------------------------------------ life
    def restart(self) -> None:
        """Stop every host (without waiting for its commits) and start new ones."""
        self._stop(cancel=True)
        self._broken = None
        self._losses.clear()
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
