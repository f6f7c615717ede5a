"""MiSA for PySpark: RocksDB state for foreachBatch jobs, committed off the critical path.

The public API, importable from here::

    from misa import StatefulJob, MisaConfig, Aggregation, Agg, ParquetBatchSink, DataFrameSink, Quarantine

Packages by responsibility: :mod:`misa.runtime` (the job, its per-batch phases, the commit
controller, recovery), :mod:`misa.state` (the store, the batch's view, codecs, the key space),
:mod:`misa.operators`, :mod:`misa.io` (sinks and quarantine), :mod:`misa.obs` (metrics and
report) and :mod:`misa.cli` (the ``misa`` command). Its errors are in
:mod:`misa.exceptions`, each a :class:`MisaError`; they and the checkpoints' errors are exported here
too. Names are loaded on first use, so ``import misa.config`` stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "StatefulJob": "misa.job",
    "from_query": "misa.query.job",
    "QueryJob": "misa.query.job",
    "transform_with_state_in_pandas": "misa.query.job",
    "ProcessorJob": "misa.query.job",
    "StatefulProcessorOperator": "misa.operators.processor",
    "SessionAggregation": "misa.operators.sessions",
    "Deduplicate": "misa.operators.dedup",
    "UnsupportedQueryError": "misa.exceptions",
    "BadRecordFilter": "misa.runtime.batch_input",
    "MisaConfig": "misa.config",
    "StatefulOperator": "misa.operators.base",
    "HintSource": "misa.operators.base",
    "KeyPartitioned": "misa.operators.base",
    "KeyColumns": "misa.parallel.routing",
    "OperatorResult": "misa.operators.base",
    "StateView": "misa.state.view",
    "Agg": "misa.operators.aggregation",
    "Aggregation": "misa.operators.aggregation",
    "IntervalJoin": "misa.operators.interval_join",
    "LookupJoin": "misa.operators.keyed",
    "TopN": "misa.operators.keyed",
    "KeyedJoin": "misa.operators.keyed",
    "LookupAggregation": "misa.operators.lookup_aggregation",
    "ParquetBatchSink": "misa.io.sink",
    "DataFrameSink": "misa.io.dataframe_sink",
    "KafkaTransactionalSink": "misa.io.kafka_sink",
    "read_batches": "misa.io.sink",
    "final_results": "misa.io.sink",
    "Quarantine": "misa.io.quarantine",
    "parse_json_lines": "misa.io.quarantine",
    "read_quarantine": "misa.io.quarantine",
    "column_of": "misa.operators.schema",
    "MisaError": "common.errors",
    "ConfigError": "misa.exceptions",
    "CommitFailedError": "misa.exceptions",
    "RecoveryError": "misa.exceptions",
    "IncompatibleStateError": "misa.exceptions",
    "AnalysisError": "misa.exceptions",
    "DfsUnavailableError": "checkpoint.exceptions",
    "CorruptCheckpointError": "checkpoint.exceptions",
    "OwnershipError": "checkpoint.exceptions",
    "LocationError": "common.errors",
    "StateSourceError": "misa.exceptions",
    "register_state_sources": "misa.state_source.sources",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'misa' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
