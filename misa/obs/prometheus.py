"""The runtime's per-batch metrics on a Prometheus endpoint (``spark.misa.metrics.prometheusPort``, docs/metrics.md).

Every metric is named ``misa_*`` and labelled with the query (its name, else Spark's query id). The
metrics live in ``prometheus_client``'s default registry, so one endpoint serves every query of the
driver process (and whatever else the process registers there); ``prometheus_client`` is the
optional extra ``prometheus``, imported only when the endpoint is asked for.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

from misa.exceptions import ConfigError
from misa.obs.records import BATCH_PHASES, CACHE_COUNTERS, COMMIT_PHASES, PREFETCH_COUNTERS, BatchReport
from misa.state.memory_tier import MEMORY_COUNTERS
from misa.state.store import EMPTY_VERSION

PORT_KEY = "spark.misa.metrics.prometheusPort"
INSTALL = "pip install 'misa-pyspark[prometheus]'"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))
ROWS = ("input_rows", "output_rows", "late_rows", "dropped_rows", "bad_records")


def client(port: int) -> ModuleType:
    """``prometheus_client``, or a one-line :class:`ConfigError` saying how to install it."""
    try:
        import prometheus_client
    except ImportError:
        raise ConfigError(
            f"{PORT_KEY}={port} needs the prometheus_client library, which is not installed: {INSTALL}"
        ) from None
    return prometheus_client


class _Families:
    """The metric families, registered once per process."""

    def __init__(self, pc: ModuleType):
        q = ("query",)
        self.batch_id = pc.Gauge("misa_batch_id", "Id of the query's latest batch", q)
        self.batches = pc.Counter("misa_batches", "Batches run by the runtime", q)
        self.batch_seconds = pc.Histogram(
            "misa_batch_seconds", "The runtime's time per batch on the driver", q, buckets=BUCKETS
        )
        self.latency = pc.Histogram(
            "misa_batch_latency_seconds", "Spark's batch latency (triggerExecution)", q, buckets=BUCKETS
        )
        self.phase = pc.Histogram(
            "misa_batch_phase_seconds", "Time per batch phase on the driver", ("query", "phase"), buckets=BUCKETS
        )
        self.last_phase = pc.Gauge("misa_last_batch_phase_seconds", "The latest batch's phases", ("query", "phase"))
        self.rows = {name: pc.Counter(f"misa_{name}", f"Rows counted by the runtime: {name}", q) for name in ROWS}
        self.state_keys = pc.Gauge("misa_state_keys", "State keys (RocksDB's estimate)", q)
        self.state_bytes = pc.Gauge("misa_state_bytes", "State size in RocksDB (live SST files and memtables)", q)
        self.state_reads = pc.Counter("misa_state_reads", "State reads by the operator", q)
        self.pending = pc.Gauge("misa_commit_versions_pending", "Versions handed to the commit, not yet durable", q)
        self.last_local = pc.Gauge("misa_commit_last_local_version", "Newest locally committed version (ack 1)", q)
        self.last_durable = pc.Gauge("misa_commit_last_durable_version", "Newest durable version (ack 2)", q)
        self.commits = pc.Counter("misa_commits", "Versions whose commit finished", q)
        self.commit_phase = pc.Histogram(
            "misa_commit_phase_seconds", "Time per commit phase", ("query", "phase"), buckets=BUCKETS
        )
        self.uploaded = pc.Counter("misa_commit_uploaded_bytes", "Bytes copied to the DFS", q)
        self.reused = pc.Counter("misa_commit_reused_bytes", "Bytes of files the DFS already had", q)
        self.restarts = pc.Counter("misa_commit_restarts", "Commit stages redone after a worker died", q)
        self.cache = {
            n: pc.Counter(f"misa_cache_{n}", f"State cache counter {n}", q) for n in (*CACHE_COUNTERS, *MEMORY_COUNTERS)
        }
        self.prefetch = {n: pc.Counter(f"misa_prefetch_{n}", f"Prefetch counter {n}", q) for n in PREFETCH_COUNTERS}


_lock = threading.Lock()
_families: _Families | None = None
_servers: dict[int, list[Any]] = {}  # port -> [server, thread, exporters using it]


class PrometheusExporter:
    """Exports one query's batches; serves every query's metrics on ``port`` while an exporter uses it."""

    def __init__(self, port: int, query: str):
        global _families
        pc = client(port)
        self.port, self.query = port, query
        with _lock:
            if _families is None:
                _families = _Families(pc)
            self._m = _families
            if port not in _servers:
                try:
                    server, thread = pc.start_http_server(port)
                except OSError as exc:
                    raise ConfigError(
                        f"{PORT_KEY}={port}: cannot serve Prometheus metrics on port {port} ({exc.strerror}): "
                        "choose a free port, or 0 for no endpoint"
                    ) from None
                _servers[port] = [server, thread, 0]
            _servers[port][2] += 1
        self._serving = True

    def observe_batch(self, report: BatchReport) -> None:
        """Export a batch's record, the commits that finished during it and the commit's status."""
        m, q, record = self._m, self.query, report.record
        m.batch_id.labels(q).set(report.batch_id)
        m.batches.labels(q).inc()
        m.batch_seconds.labels(q).observe(record.batch_s)
        for phase in BATCH_PHASES:
            seconds = getattr(record.phases, phase)
            m.phase.labels(q, phase[:-2]).observe(seconds)
            m.last_phase.labels(q, phase[:-2]).set(seconds)
        for name, counter in m.rows.items():
            counter.labels(q).inc(getattr(record, name) or 0)
        m.state_keys.labels(q).set(record.state_keys)
        m.state_bytes.labels(q).set(record.state_bytes)
        m.state_reads.labels(q).inc(record.state_reads)
        for name, value in record.cache.items():
            if name in m.cache:
                m.cache[name].labels(q).inc(value)
        for name, value in (record.prefetch or {}).items():
            if name in m.prefetch:
                m.prefetch[name].labels(q).inc(value)
        for commit in report.commits:
            m.commits.labels(q).inc()
            for phase in COMMIT_PHASES:
                m.commit_phase.labels(q, phase[:-2]).observe(getattr(commit, phase))
            m.uploaded.labels(q).inc(commit.bytes_uploaded)
            m.reused.labels(q).inc(commit.bytes_reused)
            m.restarts.labels(q).inc(commit.restarts)
        status = report.commit_status
        m.pending.labels(q).set(status.lag)
        m.last_local.labels(q).set(EMPTY_VERSION if status.last_local is None else status.last_local)
        m.last_durable.labels(q).set(EMPTY_VERSION if status.last_durable is None else status.last_durable)

    def observe_latency(self, seconds: float) -> None:
        """Export Spark's latency of a batch, when Spark reports it."""
        self._m.latency.labels(self.query).observe(seconds)

    def close(self) -> None:
        """Stop serving the port when no other exporter uses it (the metrics stay registered)."""
        with _lock:
            entry = _servers.get(self.port)
            if entry is None or not self._serving:
                return
            self._serving = False
            entry[2] -= 1
            if entry[2] == 0:
                del _servers[self.port]
                entry[0].shutdown()
                entry[0].server_close()
