"""The errors of the jobs and their benchmarks; every one a :class:`common.errors.MisaError`."""

from common.errors import MisaError


class RedisServerError(MisaError, RuntimeError):
    """The private redis-server could not be started."""


class RegimeError(MisaError, RuntimeError):
    """A regime could not be set up (or a tool's file system is up with other parameters)."""


class KafkaBrokerError(MisaError, RuntimeError):
    """The project's Kafka broker could not be installed, started or reached."""
