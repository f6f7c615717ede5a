"""The errors of prefetching; every one a :class:`common.errors.MisaError`."""

from common.errors import MisaError


class PrefetchFailedError(MisaError, RuntimeError):
    """A chunk's fetch failed (logged with its cause where it happened); its readers fetch the keys themselves."""
