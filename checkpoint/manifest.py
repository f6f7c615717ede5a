"""Per-shard manifests and query-level commit markers, and the layout they live in.

The layout is the same on local disk and on the DFS (relative to a root)::

    shard-<s>/sst/<stem>-<digest16>.sst     immutable SST files, shared by versions (DFS)
    shard-<s>/meta/<name>-<digest16>        RocksDB metadata files (DFS)
    shard-<s>/ckpt/<v>/                     the RocksDB checkpoint directory (local only)
    shard-<s>/manifest/<v>.json             files, sizes, digests, operator metadata
    _commits/<v>                            commit marker, written last
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

COMMITS_DIR = "_commits"


def shard_dir(shard: int) -> str:
    return f"shard-{shard}"


def manifest_path(shard: int, version: int) -> str:
    return f"{shard_dir(shard)}/manifest/{version}.json"


def marker_path(version: int) -> str:
    return f"{COMMITS_DIR}/{version}"


def local_checkpoint_dir(shard: int, version: int) -> str:
    return f"{shard_dir(shard)}/ckpt/{version}"


@dataclass(frozen=True)
class FileEntry:
    """One file of a RocksDB checkpoint: its local name, size and SHA-256."""

    name: str
    size: int
    sha256: str

    def remote_path(self, shard: int) -> str:
        """Content-addressed DFS path: a rebuilt file with a reused number never collides."""
        stem, dot, ext = self.name.rpartition(".")
        if ext == "sst" and dot:
            return f"{shard_dir(shard)}/sst/{stem}-{self.sha256[:16]}.sst"
        return f"{shard_dir(shard)}/meta/{self.name}-{self.sha256[:16]}"


@dataclass(frozen=True)
class ShardManifest:
    """What one shard's state at one version consists of."""

    version: int
    shard: int
    files: tuple[FileEntry, ...]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "version": self.version,
                "shard": self.shard,
                "files": [vars(f) for f in self.files],
                "metadata": self.metadata,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "ShardManifest":
        raw = json.loads(data)
        files = tuple(FileEntry(**f) for f in raw["files"])
        return cls(raw["version"], raw["shard"], files, raw.get("metadata", {}))


@dataclass(frozen=True)
class CommitMarker:
    """The commit point of a version: the digest of every shard manifest it consists of."""

    version: int
    manifest_sha256: tuple[str, ...]
    created: float = field(default_factory=time.time)

    @property
    def shards(self) -> int:
        return len(self.manifest_sha256)

    @classmethod
    def for_manifests(cls, version: int, manifests: list[ShardManifest]) -> "CommitMarker":
        return cls(version, tuple(hashlib.sha256(m.to_json()).hexdigest() for m in manifests))

    def to_json(self) -> bytes:
        return json.dumps(
            {"version": self.version, "manifest_sha256": list(self.manifest_sha256), "created": self.created}
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "CommitMarker":
        """Parse a marker; a torn or foreign file raises ValueError."""
        try:
            raw = json.loads(data)
            return cls(int(raw["version"]), tuple(raw["manifest_sha256"]), float(raw["created"]))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a commit marker: {exc}") from exc
