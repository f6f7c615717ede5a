"""The errors of the checkpoints; every one a :class:`common.errors.MisaError`."""

from common.errors import MisaError


class DfsUnavailableError(MisaError, RuntimeError):
    """A DFS operation still failed after every retry; nothing durable was lost."""


class CorruptCheckpointError(MisaError, RuntimeError):
    """A checkpoint file is missing, truncated or fails its checksum."""


class UploadVerificationError(MisaError, OSError):
    """A file on the DFS does not have the size or digest just written; the upload is retried."""


class ManifestError(MisaError, ValueError):
    """A manifest or marker that is torn, of the wrong shape, or names a file it may not (tampering)."""


class ShardCountError(MisaError, ValueError):
    """A version was checkpointed with a different number of shards than the store has now."""


class LinkedPathError(MisaError, RuntimeError):
    """A path below a root that a symbolic link leads elsewhere: refused, never followed."""


class OwnershipError(MisaError, RuntimeError):
    """Another driver or another query owns this state: refused before anything was changed."""
