"""The errors of the local services; every one a :class:`common.errors.MisaError`."""

from common.errors import MisaError


class RedisServerError(MisaError, RuntimeError):
    """The private redis-server could not be started."""


class KafkaBrokerError(MisaError, RuntimeError):
    """The project's Kafka broker could not be installed, started or reached."""
