"""What a live run measured: batch latency, end-to-end latency per record, the backlog, and whether the rate held.

Inputs are the run's own records: the arrival time of each input file (the feeder's), Spark's file
source log (``CHECKPOINT/sources/0/``: which batch read which file), and the per-batch metrics
(``started`` + ``latency_s`` = the end of the batch). A record's end-to-end latency is the end of
the batch that processed its file minus the file's arrival; a file no batch finished counts with
the time it waited until the run stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from misa.obs.records import PREFETCH_COUNTERS
from misa.obs.report import load_metrics
from misa.runtime.spark_log import SparkCheckpointLog


@dataclass(frozen=True)
class Arrival:
    """One input file as the feeder delivered it."""

    name: str
    at: float  # wall-clock time of the rename into the input folder
    records: int


def file_batches(checkpoint: Path) -> dict[str, int]:
    """File name -> the batch that read it, from Spark's file source log (plain and ``.compact`` entries)."""
    return {f.name: f.batch for entry in SparkCheckpointLog(checkpoint).source_entries() for f in entry.files}


def batch_ends(metrics: Path) -> dict[int, float]:
    """Batch id -> wall-clock end of the batch (Spark's trigger start plus its triggerExecution)."""
    records, _ = load_metrics(metrics) if metrics.exists() else ([], 0)
    return {int(r["batch_id"]): float(r["started"]) + float(r["latency_s"]) for r in records}


def after_kill(metrics: Path, killed: float, window_s: float = 60.0) -> dict[str, float | int | None]:
    """The batches that started within ``window_s`` seconds after an executor was killed at ``killed``: their
    count, p99 and largest latency, and the first one's end (from the kill, s)."""
    records, _ = load_metrics(metrics) if metrics.exists() else ([], 0)
    kept = [r for r in records if killed <= float(r["started"]) <= killed + window_s]
    latency = np.array([r["latency_s"] for r in kept], float)
    ended = [float(r["started"]) + float(r["latency_s"]) - killed for r in kept]
    return {
        "kill_batches": len(kept),
        "kill_batch_p99": float(np.percentile(latency, 99)) if len(latency) else None,
        "kill_batch_max": float(latency.max()) if len(latency) else None,
        "kill_first_batch_end_s": min(ended) if ended else None,
    }


def end_to_end(
    arrivals: Sequence[Arrival], batch_of: dict[str, int], ends: dict[int, float], stopped: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each file's end-to-end latency (s) and its record count; unfinished files count until ``stopped``."""
    latency = [ends.get(batch_of.get(a.name, -1), stopped) - a.at for a in arrivals]
    return np.array(latency, float), np.array([a.records for a in arrivals], float)


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float | None:
    """The ``q``-th percentile of ``values`` with each value counted ``weights`` times."""
    keep = weights > 0
    if not keep.any():
        return None
    order = np.argsort(values[keep])
    sorted_values, cumulative = values[keep][order], np.cumsum(weights[keep][order])
    return float(sorted_values[np.searchsorted(cumulative, q / 100 * cumulative[-1])])


def backlog_at(
    arrivals: Sequence[Arrival], batch_of: dict[str, int], ends: dict[int, float], when: float
) -> tuple[int, int]:
    """Files and records that had arrived by ``when`` and that no batch had finished by then."""
    waiting = [a for a in arrivals if a.at <= when and ends.get(batch_of.get(a.name, -1), float("inf")) > when]
    return len(waiting), sum(a.records for a in waiting)


def batch_latency(metrics: Path, warmup: int) -> dict[str, float | int | None]:
    """p50 and p99 of Spark's batch latency, the first ``warmup`` batches left out, and the mean phases."""
    records, _ = load_metrics(metrics) if metrics.exists() else ([], 0)
    kept = [r for r in records if r["batch_id"] >= warmup]
    latency = np.array([r["latency_s"] for r in kept], float)
    phases: dict[str, float] = {}
    for record in kept:
        for name, value in (record.get("phases") or {}).items():
            phases[name] = phases.get(name, 0.0) + value / len(kept)
    outside = [r["latency_s"] - r["batch_s"] for r in kept if r.get("batch_s") is not None]
    if outside:
        phases["outside_foreach_batch_s"] = float(np.mean(outside))
    commits = [r["commit"] for r in kept if r.get("commit")]
    if commits:
        phases["commit_background_s"] = float(
            np.mean([c["apply_s"] + c["flush_s"] + c["checkpoint_s"] + c["upload_s"] for c in commits])
        )
    return {
        "batches": len(kept),
        "prefetch": prefetch_per_batch(kept),
        "commit": commit_cost(commits),
        "batch_p50": float(np.percentile(latency, 50)) if len(latency) else None,
        "batch_p99": float(np.percentile(latency, 99)) if len(latency) else None,
        "state_keys": max((r.get("state_keys") or 0 for r in kept), default=0) or None,
        "spark_state_rows": max((r.get("spark_state_rows") or 0 for r in kept), default=0) or None,
        # the runtime's RocksDB (live SST files of every shard) or Spark's (its rocksdbSstFileSize metric)
        "sst_bytes": max((r.get("sst_bytes") or r.get("spark_state_sst_bytes") or 0 for r in kept), default=0) or None,
        "phases": phases,
    }


def commit_cost(commits: Sequence[dict]) -> dict[str, float] | None:
    """What a version's commit cost, mean per version: requests to the DFS (the upload, the retention GC after
    it, the mirror of Spark's log), bytes uploaded, and the time from the hand-over to ack 1 and to ack 2
    (p50 and p99). None without commits that reach ack 1 (nocommit and the native modes)."""
    if not any(c.get("ack1_s") for c in commits):
        return None

    def mean(name: str) -> float:
        return float(np.mean([c.get(name) or 0 for c in commits]))

    ack1, ack2 = (np.array([c.get(k) or 0.0 for c in commits], float) for k in ("ack1_s", "ack2_s"))
    return {
        "versions": len(commits),
        "upload_requests": mean("dfs_requests"),
        "retention_requests": mean("retention_requests"),
        "log_requests": mean("log_requests"),
        "bytes_uploaded": mean("bytes_uploaded"),
        "log_files": mean("log_files_mirrored"),
        "ack1_p50": float(np.percentile(ack1, 50)),
        "ack1_p99": float(np.percentile(ack1, 99)),
        "ack2_p50": float(np.percentile(ack2, 50)),
        "ack2_p99": float(np.percentile(ack2, 99)),
        "upload_s": mean("upload_s"),
        "log_mirror_s": mean("log_mirror_s"),
    }


def prefetch_per_batch(records: Sequence[dict]) -> dict[str, float | int | None] | None:
    """Mean prefetch counters per batch, the hit-weighted mean slack, the smallest slack, and the batches
    whose hints could not be extracted ahead (None without prefetching)."""
    stats = [r["prefetch"] for r in records if r.get("prefetch")]
    if not stats:
        return None
    out: dict[str, float | int | None] = {k: float(np.mean([s.get(k) or 0 for s in stats])) for k in PREFETCH_COUNTERS}
    hits = sum(s.get("prefetch_hits") or 0 for s in stats)
    weighted = sum((s.get("slack_s_mean") or 0.0) * (s.get("prefetch_hits") or 0) for s in stats)
    out["slack_s_mean"] = weighted / hits if hits else None
    out["slack_s_min"] = min((s["slack_s_min"] for s in stats if s.get("slack_s_min") is not None), default=None)
    out["not_ahead"] = sum(1 for s in stats if s.get("next_unavailable"))
    return out
