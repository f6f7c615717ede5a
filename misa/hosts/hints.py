"""Keyed prefetching on the executors: a batch's hint rows go from the hint job's tasks straight to the state host
that owns each key, which prefetches them before the batch's deltas reach it; the driver gets counts, never rows."""

from __future__ import annotations

from pyspark.sql import DataFrame

from misa.hosts.client import HostPool
from misa.operators.base import KeyPartitioned
from misa.parallel.partitioned import PartitionedHints
from misa.runtime.hint_target import BatchHintLog, HintCounts, SentHints
from prefetch.hints import HINT_TS, merged_key_counts


class HostHints(PartitionedHints):
    """Hints to the state hosts (:class:`~misa.runtime.hint_target.FrameHintTarget`): a hint job's rows from its
    tasks, as the deltas go (:mod:`misa.hosts.send`); table rows (hints read on the driver) as the workers'."""

    def __init__(self, operator: KeyPartitioned, pool: HostPool):
        super().__init__(operator, pool)
        self.hosts = pool

    def hint_frame(self, hints: DataFrame, hinted: BatchHintLog) -> SentHints:
        sent = self.hosts.send(hints, self.operator.hint_key_reader(), latest_of=HINT_TS)
        try:
            replies: list[SentHints] = self.hosts.ask_each("hint_sent", [(box, sent.latest) for box in sent.inboxes])
        except BaseException:
            self.hosts.discard(sent.inboxes)
            raise
        counts = sum((reply.counts for reply in replies), HintCounts())
        hinted.rows += counts.hinted
        hashes, records = merged_key_counts([(reply.key_hashes, reply.key_records) for reply in replies])
        return SentHints(sent.rows, sum(reply.hot for reply in replies), counts, hashes, records)
