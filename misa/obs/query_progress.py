"""misa's state phase in Spark's own progress: the query a job starts reports it in ``lastProgress`` and
``recentProgress``, as Spark reports its own state store.

Spark builds a batch's ``StreamingQueryProgress`` in the JVM from the batch's plan; misa's state phase runs in the
driver's Python inside ``foreachBatch``, after the plan's jobs, so nothing Spark offers a ``foreachBatch`` query can
carry it there (observed metrics are computed over the batch's rows, ``stateOperators`` come from Spark's state store
nodes). :class:`MisaStreamingQuery` is the ``StreamingQuery`` the job returns: the same query, whose progress gets a
``stateOperators`` entry for misa's operator (the fields Spark's state store fills, from the runtime's report of the
batch; misa's own phases in ``customMetrics``) and ``observedMetrics["misa"]`` with the same numbers. docs/metrics.md
says where each field comes from.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from misa.obs.records import BatchReport

OBSERVED = "misa"  # the name of misa's entry in the progress's observedMetrics


def _or_minus_one(value: int | None) -> int:
    """Spark's way of saying a count is not known: -1."""
    return -1 if value is None else value


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def state_operator(report: BatchReport, operator: str, partitions: int, shards: int) -> dict[str, Any]:
    """A ``StateOperatorProgress`` (as JSON) of misa's operator for the batch ``report`` describes."""
    record, phases = report.record, report.record.phases
    commit = report.commits[-1] if report.commits else None
    custom = {
        "misaStateRowsRead": record.state_reads,
        "misaDeltaRows": record.deltas,
        "misaOutputRows": record.output_rows,
        "misaStateReadMs": _ms(phases.state_read_s),
        "misaStateApplyMs": _ms(phases.state_apply_s),
        "misaComputeMs": _ms(phases.compute_s),
        "misaSinkMs": _ms(phases.sink_s),
        "misaCommitInlineMs": _ms(phases.commit_inline_s),
        "misaAckWaitMs": _ms(phases.ack_wait_s),
        "misaSstBytes": record.sst_bytes,
        "misaNewestDurableVersion": _or_minus_one(report.commit_status.last_durable),
        "misaVersionsPending": report.commit_status.lag,
        "misaCommittedVersion": _or_minus_one(commit and commit.version),
        "misaCommitAck1Ms": 0 if commit is None else _ms(commit.ack1_s),
        "misaCommitAck2Ms": 0 if commit is None else _ms(commit.ack2_s),
        "misaBytesUploaded": 0 if commit is None else commit.bytes_uploaded,
    }
    return {
        "operatorName": f"misa:{operator}",
        "numRowsTotal": record.state_keys,
        "numRowsUpdated": _or_minus_one(record.state_writes),
        "numRowsRemoved": _or_minus_one(record.state_deletes),
        "allUpdatesTimeMs": _ms(phases.state_apply_s),
        "allRemovalsTimeMs": 0,
        "commitTimeMs": _ms(phases.commit_inline_s + phases.ack_wait_s),
        "memoryUsedBytes": record.state_bytes,
        "numRowsDroppedByWatermark": record.late_rows,
        "numShufflePartitions": partitions,
        "numStateStoreInstances": partitions * shards,
        "customMetrics": custom,
    }


class MisaStreamingQuery(StreamingQuery):
    """The query a job started (every ``StreamingQuery`` method is the query's), whose ``lastProgress`` and
    ``recentProgress`` carry misa's state phase (see the module)."""

    def __init__(self, query: StreamingQuery, entry: Callable[[int], dict[str, Any] | None]):
        super().__init__(query._jsq)
        self._entry = entry  # batch id -> the StateOperatorProgress JSON of misa's operator, when reported

    @property
    def lastProgress(self) -> StreamingQueryProgress | None:  # type: ignore[override]
        progress = self._jsq.lastProgress()
        return None if progress is None else self._with_misa(progress)

    @property
    def recentProgress(self) -> list[StreamingQueryProgress]:  # type: ignore[override]
        return [self._with_misa(p) for p in self._jsq.recentProgress()]

    def _with_misa(self, jprogress: Any) -> StreamingQueryProgress:
        progress = json.loads(jprogress.json())
        entry = self._entry(progress["batchId"])
        if entry is not None:
            progress["stateOperators"] = [*progress.get("stateOperators", []), entry]
            observed = {k: v for k, v in entry.items() if isinstance(v, int)} | entry["customMetrics"]
            progress["observedMetrics"] = {**progress.get("observedMetrics", {}), OBSERVED: observed}
        return StreamingQueryProgress.fromJson(progress)
