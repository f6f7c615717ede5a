"""A generator's folder of JSON lines written into a Kafka topic, as the jobs' Kafka source reads it.

Every line of the folder's files (in name order, as the file source reads them) becomes one record: its value is
the line as written, malformed lines too (the job counts and quarantines them, as on files); its key is the value
of ``key_field`` when the line is a JSON object that has it (so a key's records stay in one partition, in order),
else none; its timestamp is the producer's clock. Late records stay where the generator put them in the stream.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from confluent_kafka.admin import AdminClient

from services.exceptions import KafkaBrokerError
from services.kafka_client import Record, create_topic, delete_topic, produce

BATCH = 20_000  # records per producer flush


@dataclass(frozen=True)
class Produced:
    files: int
    records: int
    malformed: int


def produce_folder(
    bootstrap: str, topic: str, source: Path, partitions: int, key_field: str | None, replace: bool = False
) -> Produced:
    """Write every line of ``source``'s files into ``topic`` (created with ``partitions`` if missing; with
    ``replace``, a topic there is deleted first, so that the topic holds this folder only)."""
    exists = topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    if exists and replace:
        delete_topic(bootstrap, topic)
        _await_gone(bootstrap, topic)
    if not exists or replace:
        create_topic(bootstrap, topic, partitions)
    files = sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
    records = malformed = 0
    chunk: list[Record] = []
    for line in _lines(files):
        key = _key(line, key_field)
        malformed += key is _MALFORMED
        chunk.append(Record(None if key is _MALFORMED else key, line))
        if len(chunk) >= BATCH:
            records += produce(bootstrap, topic, chunk)
            chunk = []
    records += produce(bootstrap, topic, chunk) if chunk else 0
    return Produced(len(files), records, malformed)


_MALFORMED = object()


def _await_gone(bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
    """Until the broker no longer lists ``topic`` (a deletion completes in the background)."""
    deadline = time.monotonic() + timeout_s
    while topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise KafkaBrokerError(f"topic {topic!r} on {bootstrap} was still listed {timeout_s} s after its deletion")
        time.sleep(0.2)


def _lines(files: list[Path]) -> Iterator[str]:
    for path in files:
        with path.open() as text:
            yield from (line.rstrip("\n") for line in text if line.strip())


def _key(line: str, key_field: str | None) -> str | None | object:
    """The record's key: ``key_field``'s value, None without one, ``_MALFORMED`` for a line that is no object."""
    try:
        value = json.loads(line)
    except ValueError:
        return _MALFORMED
    if not isinstance(value, dict):
        return _MALFORMED
    found = value.get(key_field) if key_field else None
    return None if found is None else str(found)
