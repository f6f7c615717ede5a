"""The errors of the benchmarks; every one a :class:`common.errors.MisaError`."""

from common.errors import MisaError


class RegimeError(MisaError, RuntimeError):
    """A regime could not be set up (or a tool's file system is up with other parameters)."""
