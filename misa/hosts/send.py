"""A batch's deltas from Spark's tasks straight to their partition's host and its standbys, as Arrow Flight streams.

Each task of the delta job (``mapInArrow``) casts its rows to the deltas' Arrow schema (as ``toArrow`` would give
them to the driver), splits them by key partition (:mod:`misa.parallel.routing`, the hash the driver's placement
uses) and streams each part to its host (and standbys) under the sending's token, its Spark partition and its
attempt. A standby that does not take its part fails no task: it cannot take the request that names the rows, and
the driver drops it. It
returns one small row per host it sent to; the driver collects those rows, so it learns which task attempts
Spark accepted, and tells each host to take exactly their streams, in Spark's partition order.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
from pyspark.sql import DataFrame

from misa.exceptions import StateWorkerError
from misa.hosts.server import Inbox, call_options, stream_path
from misa.parallel.routing import KeysOf, partition_of_rows, split

SENT_SCHEMA = "spark_partition int, attempt int, host int, rows long, latest long"


@dataclass(frozen=True)
class Sending:
    """What one sending's tasks need: each partition's hosts' locations (its host first, then its standbys) and
    their key, the token, the rows' Arrow schema (IPC bytes), how to read a table's key columns and the integer
    column whose largest value per host is reported (None: none)."""

    locations: tuple[tuple[str, ...], ...]
    key: bytes
    token: str
    schema: bytes
    keys_of: KeysOf
    latest_of: str | None = None
    only: int | None = None  # send only this host's rows (a new host catching up); None: every host's


@dataclass(frozen=True)
class Sent:
    """A sending as the hosts got it: each host's inbox reference, the rows, the largest value of the sending's
    ``latest_of`` column (None: no such column, or no rows)."""

    inboxes: list[Inbox]
    rows: int
    latest: int | None


def send_partition(sending: Sending, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's part of the sending (the ``mapInArrow`` function): every row to its host; one row per host sent to."""
    from pyspark import TaskContext

    context = TaskContext.get()
    yield send_rows(sending, context.partitionId(), context.attemptNumber(), batches)


def send_rows(
    sending: Sending, spark_partition: int, attempt: int, batches: Iterator[pa.RecordBatch]
) -> pa.RecordBatch:
    """Stream every row of ``batches`` (Spark partition ``spark_partition``'s task attempt ``attempt``) to its host;
    one row per host sent to: the partition, the attempt, the host, the rows it got and their largest
    ``latest_of``."""
    schema = pa.ipc.read_schema(pa.py_buffer(sending.schema))
    hosts = len(sending.locations)
    streams = _Streams(sending, spark_partition, attempt, schema)
    rows = [0] * hosts
    latest: list[int | None] = [None] * hosts
    try:
        for batch in batches:
            table = pa.Table.from_batches([batch]).cast(schema)
            partition = partition_of_rows(sending.keys_of(table), table.num_rows, hosts)
            for host, part in enumerate(split(table, partition, hosts)):
                if not part.num_rows or sending.only not in (None, host):
                    continue
                streams.write(host, part)
                rows[host] += part.num_rows
                if sending.latest_of is not None:
                    latest[host] = _larger(latest[host], pc.max(part[sending.latest_of]).as_py())
        streams.close()
    finally:
        streams.release()
    sent = [h for h in range(hosts) if rows[h]]
    return pa.RecordBatch.from_pydict(
        {
            "spark_partition": pa.array([spark_partition] * len(sent), pa.int32()),
            "attempt": pa.array([attempt] * len(sent), pa.int32()),
            "host": pa.array(sent, pa.int32()),
            "rows": pa.array([rows[h] for h in sent], pa.int64()),
            "latest": pa.array([latest[h] for h in sent], pa.int64()),
        }
    )


class _Streams:
    """One task's streams to the hosts and standbys of a sending, opened as rows for them come. A host that does not
    take its part fails the task (:class:`StateWorkerError`); a standby that does not is left out."""

    def __init__(self, sending: Sending, spark_partition: int, attempt: int, schema: pa.Schema):
        self.sending = sending
        self.path = stream_path(sending.token, spark_partition, attempt)
        self.schema = schema
        self.writers: dict[tuple[int, int], Any] = {}  # by (partition, replica)
        self.clients: list[flight.FlightClient] = []
        self.left_out: set[tuple[int, int]] = set()

    def write(self, host: int, part: pa.Table) -> None:
        for replica in range(len(self.sending.locations[host])):
            self._step((host, replica), lambda w: w.write_table(part))

    def close(self) -> None:
        for target in list(self.writers):
            self._step(target, lambda w: w.close())

    def _step(self, target: tuple[int, int], step: Any) -> None:
        if target in self.left_out:
            return
        try:
            if target not in self.writers:
                client = flight.FlightClient(self.sending.locations[target[0]][target[1]])
                self.clients.append(client)
                descriptor = flight.FlightDescriptor.for_path(*self.path)
                self.writers[target], _ = client.do_put(descriptor, self.schema, call_options(self.sending.key))
            step(self.writers[target])
        except flight.FlightError as exc:
            host, replica = target
            if replica:
                self.left_out.add(target)
                return
            raise StateWorkerError(
                f"the state host of partition {host} ({self.sending.locations[host][0]}) did not take this task's "
                f"deltas: {str(exc).strip().splitlines()[0]}"
            ) from exc

    def release(self) -> None:
        for client in self.clients:
            client.close()


def _larger(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def send_frame(
    frame: DataFrame,
    locations: Sequence[tuple[str, ...]],
    key: bytes,
    keys_of: KeysOf,
    latest_of: str | None = None,
    only: int | None = None,
    token: str | None = None,
) -> Sent:
    """Run ``frame``'s job with every task sending its rows to their partitions' hosts (``locations``: each
    partition's, its host first, then its standbys; ``only``: to that partition alone) under
    ``token`` (None: a new one): each host's inbox reference (the accepted task attempts' streams), the rows sent and
    the largest value of column ``latest_of``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    large = frame.sparkSession.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
    schema = to_arrow_schema(
        frame.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC", prefers_large_types=large
    )
    wire = schema.serialize().to_pybytes()
    sending = Sending(tuple(locations), key, token or uuid.uuid4().hex, wire, keys_of, latest_of, only)
    sent = frame.mapInArrow(lambda batches: send_partition(sending, batches), SENT_SCHEMA).collect()
    sources: list[list[tuple[int, int]]] = [[] for _ in locations]
    for row in sorted(sent, key=lambda r: r.spark_partition):
        sources[row.host].append((row.spark_partition, row.attempt))
    inboxes = [Inbox(sending.token, tuple(s), sending.schema) for s in sources]
    latest = [row.latest for row in sent if row.latest is not None]
    return Sent(inboxes, sum(row.rows for row in sent), max(latest) if latest else None)
