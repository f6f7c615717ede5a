"""A state host's Arrow Flight server: one key partition's :class:`~misa.parallel.worker.PartitionWorker`, reached
over the network.

* ``do_put`` takes a table into the host's inbox: a Spark task's deltas for this partition, or the driver's hint
  rows. The descriptor's path names the stream: a token (one per batch's sending), the Spark partition and the
  task attempt that sent it.
* ``do_action`` ``request`` runs one of the worker's requests (pickled name and arguments; the reply, or the
  error, pickled back), one at a time; ``ping`` answers at once, also while a request runs, so the driver can
  tell a busy host from a hung one.
* ``do_get`` hands over the output table the worker left (the newest batch's).
* ``do_action`` ``write`` writes output tables (its own and other hosts', fetched from them) through a pickled
  writer, a sink's part (:class:`~misa.io.spread.SpreadSink`), beside the requests: it reads only outputs.

Every call must carry the launch's key (:func:`call_options`), which only the driver and the query's tasks know:
the requests are pickled, so a host must never read one from anyone else. The traffic itself is not encrypted,
like Spark's own shuffle unless ``spark.network.crypto.enabled`` is set: keep the cluster's network private.
"""

from __future__ import annotations

import hmac
import pickle
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight

from misa.parallel.routing import concatenated
from misa.parallel.worker import CLOSE, portable

REQUEST, PING, WRITE = "request", "ping", "write"
KEY_HEADER = "misa-host-key"  # every call carries the launch's key: a host runs no request of anyone else's


@dataclass(frozen=True)
class Inbox:
    """The tables of one sending in a host's inbox: ``token``'s streams from ``sources`` (Spark partition and task
    attempt each, in the order Spark's partitions give the rows), cast to the Arrow ``schema`` (IPC bytes)."""

    token: str
    sources: tuple[tuple[int, int], ...]
    schema: bytes


@dataclass(frozen=True)
class Output:
    """An output table left on a host under ``handle``: its rows and Arrow schema (IPC bytes; empty: no columns)."""

    handle: str
    rows: int
    schema: bytes


def call_options(key: bytes, timeout: float | None = None) -> flight.FlightCallOptions:
    """Options of a call to a host of the launch whose key is ``key`` (``timeout``: seconds, None: none)."""
    return flight.FlightCallOptions(headers=[(KEY_HEADER.encode(), key.hex().encode())], timeout=timeout)


class _KeyCheck(flight.ServerMiddlewareFactory):
    """Refuses a call without the launch's key, before the host reads anything of it."""

    def __init__(self, key: bytes):
        self.key = key.hex()

    def start_call(self, info: Any, headers: dict[str, list[Any]]) -> None:
        given = headers.get(KEY_HEADER, [""])[0]
        given = given.decode() if isinstance(given, bytes) else given
        if not hmac.compare_digest(given, self.key):
            raise flight.FlightUnauthenticatedError("not a call of this state host's driver or query")


def stream_path(token: str, spark_partition: int, attempt: int) -> list[bytes]:
    """The Flight descriptor path of one stream into a host's inbox."""
    return [token.encode(), str(spark_partition).encode(), str(attempt).encode()]


class HostTables:
    """The tables a host holds: streams put into its inbox, outputs left for the driver
    (:class:`~misa.parallel.worker.TableTransport`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inbox: dict[str, dict[tuple[int, int], list[pa.Table]]] = {}
        self._outputs: dict[str, pa.Table] = {}

    def put(self, path: list[bytes], table: pa.Table) -> None:
        """Add a stream's table under its descriptor ``path`` (:func:`stream_path`)."""
        token, spark_partition, attempt = (p.decode() for p in path)
        with self._lock:
            streams = self._inbox.setdefault(token, {})
            streams.setdefault((int(spark_partition), int(attempt)), []).append(table)

    def take(self, ref: Inbox) -> pa.Table:
        """The sending's rows from its accepted sources, in order; every stream of the sending is dropped (a failed
        task attempt's too)."""
        schema = pa.ipc.read_schema(pa.py_buffer(ref.schema))
        with self._lock:
            streams = self._inbox.pop(ref.token, {})
        missing = [s for s in ref.sources if s not in streams]
        if missing:
            raise RuntimeError(
                f"the state host never received the rows Spark's tasks reported sending it (Spark partition, attempt: "
                f"{missing}): the batch fails and its replay sends them again"
            )
        tables = [t.cast(schema) for source in ref.sources for t in streams[source]]
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def drop(self, token: str) -> None:
        """Forget a sending (its batch failed before the host took it)."""
        with self._lock:
            self._inbox.pop(token, None)

    def share(self, table: pa.Table) -> Output:
        """Leave ``table``, the newest batch's output, to be read (a retried task reads it again) until the next
        batch's output replaces it."""
        handle = uuid.uuid4().hex
        with self._lock:
            self._outputs = {handle: table}
        schema = table.schema.serialize().to_pybytes() if table.num_columns else b""
        return Output(handle, table.num_rows, schema)

    def fetch(self, handle: str) -> pa.Table:
        """The output table left under ``handle``."""
        with self._lock:
            return self._outputs[handle]

    def holds(self, handle: str) -> bool:
        with self._lock:
            return handle in self._outputs


def fetch_output(location: str, handle: str, key: bytes) -> pa.Table:
    """The output table a host (at ``location``) left under ``handle``."""
    client = flight.FlightClient(location)
    try:
        return client.do_get(flight.Ticket(handle.encode()), call_options(key)).read_all()
    finally:
        client.close()


def write_on_host(location: str, part: int, sources: list[tuple[str, str]], write: Any, key: bytes) -> str:
    """Have the host at ``location`` write the output tables ``sources`` (host location, handle; in order) as one
    part ``part`` through ``write``; what ``write`` returned."""
    client = flight.FlightClient(location)
    try:
        body = pickle.dumps((part, sources, write))
        (reply,) = client.do_action(flight.Action(WRITE, body), call_options(key))
    finally:
        client.close()
    status, value = pickle.loads(reply.body.to_pybytes())
    if status == "error":
        raise value
    return value


class StateHostServer(flight.FlightServerBase):
    """Serves one worker's requests and tables; :meth:`closed` is set once the worker answered ``close``."""

    def __init__(self, location: str, worker: Any, tables: HostTables, key: bytes):
        super().__init__(location, middleware={"key": _KeyCheck(key)})
        self.worker = worker
        self.tables = tables
        self.closed = threading.Event()
        self._one_request = threading.Lock()
        self._key = key

    def do_put(self, context: Any, descriptor: flight.FlightDescriptor, reader: Any, writer: Any) -> None:
        self.tables.put(list(descriptor.path), reader.read_all())

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.RecordBatchStream:
        return flight.RecordBatchStream(self.tables.fetch(ticket.ticket.decode()))

    def do_action(self, context: Any, action: flight.Action) -> list[bytes]:
        if action.type == PING:
            return [b"ok"]
        if action.type == WRITE:
            return [pickle.dumps(_replied(self._write, *pickle.loads(action.body.to_pybytes())))]
        if action.type != REQUEST:
            raise flight.FlightServerError(f"unknown action {action.type!r}")
        name, args = pickle.loads(action.body.to_pybytes())
        with self._one_request:
            reply = _replied(self._answer, name, args)
        if name == CLOSE:
            self.closed.set()
        return [pickle.dumps(reply)]

    def _write(self, part: int, sources: list[tuple[str, str]], write: Any) -> Any:
        tables = [
            self.tables.fetch(handle) if self.tables.holds(handle) else fetch_output(location, handle, self._key)
            for location, handle in sources
        ]
        return write(part, concatenated(tables))

    def _answer(self, name: str, args: tuple[Any, ...]) -> Any:
        if name == "drop":
            return self.tables.drop(*args)
        return getattr(self.worker, name)(*args)


def _replied(answer: Any, *args: Any) -> tuple[str, Any]:
    """``answer(*args)`` as a reply: ("ok", its value) or ("error", the error, portable to the driver)."""
    try:
        return "ok", answer(*args)
    except Exception as exc:  # noqa: BLE001 - goes to the driver, which raises it
        return "error", portable(exc)
