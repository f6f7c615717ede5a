"""The error a ``misa`` command ends with: one line on stderr, exit status 1."""


class CommandError(Exception):
    """What the command could not do, and where; printed as ``misa: error: <message>``."""
