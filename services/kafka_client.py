"""Small Kafka helpers over confluent-kafka: create and delete a topic, produce records, read a topic back.

::

    create_topic(bootstrap, "events", partitions=3)
    produce(bootstrap, "events", [Record("k1", "v1", 1_700_000_000_000), Record("k2", "v2", partition=2)])
    consume_all(bootstrap, "events", read_committed=True)  # every record, ordered by partition and offset
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from services.exceptions import KafkaBrokerError

Data = str | bytes | None


class Record(NamedTuple):
    """A record to produce; a plain ``(key, value, timestamp_ms)`` tuple works too. No timestamp (None or 0): the
    producer's clock; no partition: the key's hash (or any, for a null key)."""

    key: Data
    value: Data
    timestamp_ms: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class Consumed:
    """A record read back from a topic."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})  # no info lines on stderr


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, config: Mapping[str, str] | None = None, timeout_s: float = 30.0
) -> None:
    """Create ``topic`` with ``partitions`` partitions (replication factor 1) and topic ``config``; wait for it."""
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
    client = admin(bootstrap)  # held until the answer: a client destroyed early fails its requests
    _wait(client.create_topics([new], request_timeout=timeout_s)[topic], f"create topic {topic!r} on {bootstrap}")


def delete_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    """Delete ``topic``; wait for the controller to accept it."""
    client = admin(bootstrap)
    _wait(client.delete_topics([topic], request_timeout=timeout_s)[topic], f"delete topic {topic!r} on {bootstrap}")


def _wait(future, what: str) -> None:
    """The admin request's answer (it fails by itself after its ``request_timeout``)."""
    try:
        future.result()
    except Exception as exc:  # KafkaException, or the future's own TimeoutError
        raise KafkaBrokerError(f"could not {what}: {exc}") from exc


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[Record | tuple],
    config: Mapping[str, object] | None = None,
    timeout_s: float = 30.0,
) -> int:
    """Produce ``records`` to ``topic`` and wait until the broker has acknowledged every one; their number.

    ``config``: more producer settings (librdkafka's names). Any record the broker refuses fails the call."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(config or {})})
    errors: list[str] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    count = 0
    for item in records:
        record = Record(*item)
        extra = {} if record.partition is None else {"partition": record.partition}
        producer.produce(
            topic,
            value=record.value,
            key=record.key,
            timestamp=record.timestamp_ms or 0,
            on_delivery=delivered,
            **extra,
        )
        producer.poll(0)
        count += 1
    left = producer.flush(timeout_s)
    if left or errors:
        raise KafkaBrokerError(
            f"produce to {topic!r} on {bootstrap}: {left} records unacknowledged after {timeout_s} s, "
            f"{len(errors)} refused{': ' + errors[0] if errors else ''}"
        )
    return count


def consume_all(bootstrap: str, topic: str, read_committed: bool = False, timeout_s: float = 30.0) -> list[Consumed]:
    """Every record of ``topic`` now, ordered by partition and offset (each partition read to its end).

    ``read_committed``: only records of committed transactions (and those written outside one), read up to the
    last stable offset, as a ``read_committed`` consumer sees them; otherwise every record written."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"misa-read-{uuid.uuid4().hex}",  # assigned, never committed
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is not None:
            raise KafkaBrokerError(f"cannot read topic {topic!r} on {bootstrap}: {metadata.error}")
        pending = set(metadata.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        records: list[Consumed] = []
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise KafkaBrokerError(
                    f"reading {topic!r} on {bootstrap}: partitions {sorted(pending)} not read to "
                    f"their end in {timeout_s} s"
                )
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaBrokerError(f"reading {topic!r} on {bootstrap}: {msg.error()}")
                pending.discard(msg.partition())
                continue
            kind, stamp = msg.timestamp()
            records.append(
                Consumed(
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    None if kind == TIMESTAMP_NOT_AVAILABLE else stamp,
                )
            )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()
