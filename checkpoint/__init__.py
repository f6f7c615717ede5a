"""Local-then-DFS checkpoints of RocksDB state: manifests, upload, restore, verification, retention."""

from .checkpoints import CheckpointStore, LocalCommit, Restored
from .dfs import DfsCheckpoints, GcStats, UploadStats, VersionInfo
from .fence import Fence, no_fence
from .local import LocalCheckpoints
from .manifest import CommitMarker, FileEntry, ShardManifest
from .retry import RetryPolicy

__all__ = [
    "CheckpointStore",
    "CommitMarker",
    "DfsCheckpoints",
    "Fence",
    "FileEntry",
    "GcStats",
    "LocalCheckpoints",
    "LocalCommit",
    "Restored",
    "RetryPolicy",
    "ShardManifest",
    "UploadStats",
    "VersionInfo",
    "no_fence",
]
