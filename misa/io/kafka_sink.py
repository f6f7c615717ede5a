"""Exactly-once output into a Kafka topic: each batch's rows in one Kafka transaction, tied to the batch id.

Spark's own Kafka sink is at-least-once: a batch replayed after a crash is written again, and a consumer sees its
rows twice. :class:`KafkaTransactionalSink` is a misa sink (``sink(batch_id, table)``) that a ``read_committed``
consumer sees each batch of exactly once:

* one producer per sink with a fixed ``transactional.id`` (``misa-sink-<sink_id>``): its ``init_transactions`` fences
  any earlier producer of the sink (a crashed or deposed driver) and aborts the transaction it left open, so rows
  of a batch that never committed are never visible to a ``read_committed`` consumer;
* each batch is one transaction holding its rows and an offset commit of the sink's own consumer group
  (``misa-sink-<sink_id>``) whose offset is the batch id plus one: the rows and the record of the batch commit
  together, or neither does;
* a batch whose id is at or below the committed one (a replay after a crash between the commit and misa's own
  record of the batch) is skipped.

A consumer must set ``isolation.level=read_committed`` (Spark's Kafka source: ``kafka.isolation.level``); a
``read_uncommitted`` consumer also sees the rows of aborted transactions. Rows go as JSON objects (timestamps as
ISO 8601 text), keyed by ``key_column`` if given. Use it as the ``sink`` of :func:`misa.from_query` or
:class:`misa.StatefulJob`; a :class:`~misa.io.dataframe_sink.DataFrameSink` whose function calls Spark's
``df.write.format("kafka")`` is at-least-once (Spark's writer has no transactions).
"""

from __future__ import annotations

import json
import logging
import time
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Mapping

import pyarrow as pa
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from common import failpoints

log = logging.getLogger(__name__)
COORDINATOR_NOT_READY = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
}


class KafkaTransactionalSink:
    """Writes each batch's rows to ``topic`` on ``bootstrap`` in a transaction of its own (see the module)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        sink_id: str,
        key_column: str | None = None,
        producer_config: Mapping[str, Any] | None = None,
    ):
        if not sink_id:
            raise ValueError("KafkaTransactionalSink: sink_id names the sink's transactions; give one per query")
        self.bootstrap, self.topic, self.key_column = bootstrap, topic, key_column
        self.name = f"misa-sink-{sink_id}"
        self._config = dict(producer_config or {})
        self._producer: Producer | None = None
        self._group: Any = None
        self._committed = -1  # the newest batch id whose transaction committed

    def __call__(self, batch_id: int, table: pa.Table) -> None:
        producer = self._ready()
        if batch_id <= self._committed:
            log.info("Kafka sink %s: batch %d committed before (at %d): skipped", self.name, batch_id, self._committed)
            return
        if self.key_column is not None and self.key_column not in table.column_names:
            raise ValueError(f"KafkaTransactionalSink: no key column {self.key_column!r} in {table.column_names}")
        producer.begin_transaction()
        try:
            for row in table.to_pylist():
                key = row.get(self.key_column) if self.key_column else None
                value = json.dumps(row, default=_json_value)
                producer.produce(self.topic, value=value, key=None if key is None else str(key))
                producer.poll(0)
            marker = [TopicPartition(self.topic, 0, batch_id + 1)]
            producer.send_offsets_to_transaction(marker, self._group)
            self._flush(producer)  # every row on the broker, in the open transaction (commit would flush too)
            failpoints.hit("kafka_sink.before_commit")
            producer.commit_transaction()
        except BaseException:
            self._abort()
            raise
        self._committed = batch_id
        failpoints.hit("kafka_sink.after_commit")

    def committed_batch(self) -> int:
        """The newest batch id the sink's transactions committed (-1: none). Keeps the sink's consumer group metadata
        too, which each transaction's offset commit names."""
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": self.name, "isolation.level": "read_committed"}
        )
        try:
            self._group = consumer.consumer_group_metadata()
            deadline = time.monotonic() + 60
            while True:
                try:
                    [position] = consumer.committed([TopicPartition(self.topic, 0)], timeout=30)
                    break
                except KafkaException as exc:  # the group's coordinator not found or still loading
                    if exc.args[0].code() not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            return -1 if position.offset == OFFSET_INVALID or position.offset < 0 else position.offset - 1
        finally:
            consumer.close()

    def close(self) -> None:
        """Flush and drop the producer (a later call starts a new one, fencing nothing it left open)."""
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None

    def _flush(self, producer: Producer) -> None:
        """Wait until the broker has every row produced so far (at most 60 s)."""
        left = producer.flush(60)
        if left:
            raise KafkaException(f"Kafka sink {self.name}: {left} rows not delivered to {self.bootstrap} in 60 s")

    def _ready(self) -> Producer:
        """The producer, started and fenced in on first use, with the committed batch read back."""
        if self._producer is None:
            producer = Producer(
                {"bootstrap.servers": self.bootstrap, "transactional.id": self.name, "linger.ms": 5, **self._config}
            )
            producer.init_transactions(30)  # fences earlier producers of this sink, aborts what they left open
            self._committed = self.committed_batch()
            self._producer = producer
        return self._producer

    def _abort(self) -> None:
        """Abort the open transaction, or drop the producer if it cannot (the next one aborts it when it starts)."""
        try:
            assert self._producer is not None
            self._producer.abort_transaction(30)
        except Exception:  # noqa: BLE001 - a fenced or broken producer: the next init_transactions aborts it
            self._producer = None


def _json_value(value: Any) -> Any:
    """A value ``json`` cannot write as is: timestamps and dates as ISO 8601, decimals as text, bytes as hex."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"KafkaTransactionalSink cannot write a {type(value).__name__} as JSON")
