"""A Python streaming source whose offsets the test controls, standing in for Kafka: ``format("misa-test-topic")``.

The topic is a folder of JSON-lines files, ``NNNNN.jsonl``, each written whole by the test; a record's offset is its
position across the files in name order. Like Kafka's source with ``maxOffsetsPerTrigger``, option
``maxRecordsPerBatch`` caps each batch (admission control: a backlog runs as batches back to back), and
``Trigger.AvailableNow`` reads up to the offset published when the query started. Records carry ``t`` (epoch
seconds, a timestamp) and any other fields of the schema given to ``readStream.schema`` (an object as a struct).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

NAME = "misa-test-topic"


def _records(topic: str) -> list[str]:
    return [line for f in sorted(Path(topic).glob("*.jsonl")) for line in f.read_text().splitlines() if line]


class TopicSource(DataSource):
    """The topic under option ``path``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "t timestamp, k int, v bigint"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _TopicReader(self.options["path"], int(self.options.get("maxRecordsPerBatch", 0)), schema)


class _Range(InputPartition):
    def __init__(self, start: int, end: int):
        self.start, self.end = start, end


class _TopicReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, topic: str, max_records: int, schema: Any):
        self.topic, self.max_records, self.fields = topic, max_records, [f.name for f in schema.fields]
        self.target: int | None = None  # availableNow's end

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = len(_records(self.topic)) if self.target is None else self.target
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["offset"] + limit.max_rows)
        return {"offset": max(end, start["offset"])}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = len(_records(self.topic))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [_Range(start["offset"], end["offset"])] if end["offset"] > start["offset"] else []

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, _Range)
        for line in _records(self.topic)[partition.start : partition.end]:
            record = json.loads(line)
            record["t"] = datetime.fromtimestamp(record["t"], timezone.utc)
            yield tuple(_value(record.get(f)) for f in self.fields)


def _value(value: Any) -> Any:
    """A JSON value as the source gives it to Spark: an object (a struct) as the tuple of its values."""
    return tuple(value.values()) if isinstance(value, dict) else value
