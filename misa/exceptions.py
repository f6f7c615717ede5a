"""The errors the ``misa`` package raises on purpose; every one a :class:`common.errors.MisaError`."""

from common.errors import MisaError


class ConfigError(MisaError, ValueError):
    """A ``spark.misa.*`` key is unknown, or its value does not have the expected form or lies outside its range."""


class CommitFailedError(MisaError, RuntimeError):
    """The commit of a version failed for good, so its batch cannot be acknowledged; the cause is chained."""


class RecoveryError(MisaError, RuntimeError):
    """Spark's checkpoint and the state store disagree in a way the protocol rules out."""


class IncompatibleStateError(MisaError, RuntimeError):
    """The state was written by an operator definition this one cannot read."""


class AnalysisError(MisaError, TypeError):
    """The operator does not fit its input: a missing column or a type it cannot use (Spark's AnalysisException)."""


class AggregateOverflowError(MisaError, ArithmeticError):
    """A sum of integers left the bigint range under ``spark.sql.ansi.enabled`` (Spark's ARITHMETIC_OVERFLOW)."""


class LifecycleError(MisaError, RuntimeError):
    """A version was moved out of order: a bug in its caller, not a failure of the commit."""


class CommandError(MisaError):
    """What a ``misa`` command could not do, and where; printed as ``misa: error: <message>``, exit status 1."""


class StateWorkerError(MisaError, RuntimeError):
    """A state worker process (``spark.misa.state.processes`` > 1) died or stopped answering: the batch fails."""


class UnsupportedQueryError(AnalysisError):
    """A streaming query :func:`misa.from_query` cannot run: names the plan node and the nearest supported form."""


class StateSourceError(MisaError, ValueError):
    """The state data sources cannot read what was asked (not a misa state, no such version, a damaged file)."""
