"""A scenario's Kafka topics (:mod:`verify.differential.scenarios`): each engine reads topics of its own, made and
fed the same way, so both see the same partitions, offsets and record timestamps.

A topic's name is its scenario name and the engine's inputs folder hashed (``events-1a2b3c4d5e``). A row produced
is its JSON (the ``value``), keyed by its ``k``, stamped with its ``t`` (epoch seconds) as the record's
timestamp, in the partition its ``_partition`` names (else the key's).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from services.kafka_client import Record, create_topic, produce


def topic_name(inputs: Path, name: str) -> str:
    """The engine's topic ``name`` (its inputs folder tells the engines, and the scenarios, apart)."""
    return f"{name}-{hashlib.sha1(str(inputs.resolve()).encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class KafkaInputs:
    """The broker at ``bootstrap`` and the topics a scenario makes at start, by name: their partitions."""

    bootstrap: str
    topics: dict[str, int] = field(default_factory=dict)

    def create(self, inputs: Path) -> None:
        for name, partitions in self.topics.items():
            create_topic(self.bootstrap, topic_name(inputs, name), partitions)

    def produce(self, inputs: Path, name: str, rows: Iterable[dict[str, Any]]) -> None:
        produce(self.bootstrap, topic_name(inputs, name), [record(row) for row in rows])


def record(row: dict[str, Any]) -> Record:
    """A row as a Kafka record (see the module's docstring)."""
    values = {k: v for k, v in row.items() if k != "_partition"}
    key = None if values.get("k") is None else str(values["k"])
    stamp = None if values.get("t") is None else int(values["t"] * 1000)
    return Record(key, json.dumps(values), stamp, row.get("_partition"))
