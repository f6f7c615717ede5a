"""The one typed, validated, immutable configuration of MiSA, built from ``spark.misa.*`` keys.

Sources: a Spark session (what the jobs read when given no ``config=``), a SparkConf (``--conf`` /
``--properties-file``), a plain mapping, or a Spark properties file. An unknown ``spark.misa.*`` key, a
malformed value, or a number outside its key's range raises :class:`ConfigError` naming the key, the value
and the expected form with its range, when the configuration is built (also for typed values given to
:meth:`MisaConfig.with_values`).

The parts: the keys with their types, defaults and docs (:mod:`misa.config_keys`), the forms of their values
(:mod:`misa.config_forms`), the checks (:mod:`misa.config_checks`), the sources (:mod:`misa.config_sources`)
and the generated defaults file and docs page (:mod:`misa.config_docs`). :class:`CommitMode`, the type of
``commit_mode``, and :func:`parse_bytes` / :func:`parse_seconds`, the sizes' and durations' forms, are
importable from here too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from checkpoint import RetryPolicy
from misa.config_checks import check
from misa.config_keys import Settings
from misa.config_sources import read_properties, session_values, typed_values

__all__ = ["STATE_FOLDER", "MisaConfig"]

STATE_FOLDER = "misa-state"  # the default place of the state's DFS copy: <checkpoint location>/misa-state


@dataclass(frozen=True)
class MisaConfig(Settings):
    """Every MiSA setting, typed (the fields of :class:`~misa.config_keys.Settings`), checked when built. Build
    with :meth:`from_session`, :meth:`from_mapping`, :meth:`from_spark_conf` or :meth:`from_file`."""

    def __post_init__(self) -> None:
        check(self)

    # ------------------------------------------------------------------ derived settings
    @property
    def prefetching(self) -> str:
        """What prefetching does: ``true``, ``false`` or ``auto``; ``auto`` without a state cache
        (spark.misa.cache.policy=none, nothing to prefetch into) is ``false``."""
        return "false" if self.prefetch_mode == "auto" and self.cache_policy == "none" else self.prefetch_mode

    def cache_policy_for(self, prefetching: bool) -> str:
        """The cache policy while prefetching is on or off: an explicit policy always; ``auto``: tac with
        prefetching, none (only the batch's write buffer) without."""
        if self.cache_policy != "auto":
            return self.cache_policy
        return "tac" if prefetching else "none"

    @property
    def effective_cache_policy(self) -> str:
        """The cache policy at start: with prefetching ``auto``, which starts off, that of prefetching off."""
        return self.cache_policy_for(self.prefetch_mode == "true")

    def retry_policy(self) -> RetryPolicy:
        """The DFS retry policy these settings describe."""
        return RetryPolicy(
            self.retry_max_attempts, self.retry_initial_backoff_s, self.retry_max_backoff_s, self.retry_jitter_s
        )

    # ------------------------------------------------------------------ building
    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> MisaConfig:
        """Build from ``{key: text}``; keys outside ``spark.misa.`` are ignored."""
        return cls(**typed_values(values))

    @classmethod
    def from_spark_conf(cls, conf: Any) -> MisaConfig:
        """Build from a ``pyspark.SparkConf`` (or anything with ``getAll()``)."""
        return cls.from_mapping(dict(conf.getAll()))

    @classmethod
    def from_session(cls, spark: Any = None) -> MisaConfig:
        """Build from a SparkSession (default: the active one): its launch conf (``--conf``, spark-defaults.conf,
        the builder's ``.config``), overridden by ``spark.conf.set`` in the session; the defaults without a session.
        What every entry point given no ``config=`` uses."""
        return cls.from_mapping(session_values(spark))

    @classmethod
    def from_file(cls, path: str | Path) -> MisaConfig:
        """Build from a Spark properties file (``key value`` or ``key=value`` lines, ``#`` comments)."""
        return cls.from_mapping(read_properties(Path(path).read_text()))

    def with_values(self, **values: Any) -> MisaConfig:
        """A copy with some typed fields replaced (for command-line overrides)."""
        return dataclasses.replace(self, **values)
