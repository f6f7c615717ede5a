"""The jobs' Kafka output (``--output-topic``): each batch's rows also written into a topic, exactly once.

The job's Parquet output stays what the jobs compare; the same rows then go into the topic through
:class:`~misa.io.kafka_sink.KafkaTransactionalSink`, one transaction per batch tied to its batch id, so that a
``read_committed`` consumer sees every batch once, however often the job was killed and restarted. The sink's
transactional id comes from the output folder, the same in every run of one job.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Protocol

import pyarrow as pa

from misa.io.kafka_sink import KafkaTransactionalSink


class BatchSink(Protocol):
    def __call__(self, batch_id: int, table: pa.Table) -> None: ...


class WithKafkaOutput:
    """A batch to the job's own sink first, then into the topic in the batch's transaction."""

    def __init__(self, sink: BatchSink, topic: KafkaTransactionalSink):
        self.sink, self.topic = sink, topic

    def __call__(self, batch_id: int, table: pa.Table) -> None:
        self.sink(batch_id, table)
        self.topic(batch_id, table)


def with_kafka_output(sink: BatchSink, args: argparse.Namespace) -> BatchSink:
    """``sink``, and with ``--output-topic`` the topic too (on ``--kafka``'s broker)."""
    if not args.output_topic:
        return sink
    sink_id = hashlib.sha256(str(args.output).encode()).hexdigest()[:16]
    return WithKafkaOutput(sink, KafkaTransactionalSink(args.kafka, args.output_topic, sink_id))
