"""The base of every error the project raises on purpose, and the errors of :mod:`common`."""


class MisaError(Exception):
    """An error MiSA raises on purpose; every package's own errors derive from it."""


class LocationError(MisaError, ValueError):
    """A location that cannot be used (no file system for its scheme, or not usable for this purpose)."""


class FailpointError(MisaError, OSError):
    """Raised by a failpoint whose action is ``raise``; an OSError so it is retried like I/O."""
