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
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .exceptions import ManifestError

COMMITS_DIR = "_commits"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHARD_DIR = re.compile(r"^shard-[0-9]+$")
_VERSION = re.compile(r"^-?[0-9]+$")
#: Names this layout writes in a shard's folders on the DFS (see :meth:`FileEntry.remote_path`): GC
#: deletes nothing else.
_OWN_NAMES = {
    "sst": re.compile(r"^.+-[0-9a-f]{16}\.sst$"),
    "meta": re.compile(r"^.+-[0-9a-f]{16}$"),
    "manifest": re.compile(r"^-?[0-9]+\.json$"),
}
SHARD_FOLDERS = tuple(_OWN_NAMES)


def check_file_name(name: object) -> str:
    """``name`` when it is a plain file name (it stays inside the folder it is joined to); else ManifestError."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ManifestError(
            f"file name {name!r} is not a plain file name: the manifest is damaged or was tampered with"
        )
    return name


def shard_dir(shard: int) -> str:
    return f"shard-{shard}"


def is_shard_dir(name: str) -> bool:
    """Whether ``name`` is a shard folder's name (``shard-<s>``)."""
    return bool(_SHARD_DIR.match(name))


def is_own_name(folder: str, name: str) -> bool:
    """Whether ``name`` in a shard's ``folder`` (one of :data:`SHARD_FOLDERS`) is a name this layout writes."""
    return bool(_OWN_NAMES[folder].match(name))


def version_of(name: str, suffix: str = "") -> int | None:
    """The version that a marker's name (``<v>``) or, with ``suffix=".json"``, a manifest's name stands
    for; None for any other name."""
    stem = name[: len(name) - len(suffix)] if name.endswith(suffix) else ""
    return int(stem) if _VERSION.match(stem) else None


def manifest_path(shard: int, version: int) -> str:
    return f"{shard_dir(shard)}/manifest/{version}.json"


def marker_path(version: int) -> str:
    return f"{COMMITS_DIR}/{version}"


def local_checkpoint_dir(shard: int, version: int) -> str:
    return f"{shard_dir(shard)}/ckpt/{version}"


def inside(folder: Path, name: str) -> Path:
    """``folder / name`` for a plain file name that resolves inside ``folder``; else ManifestError."""
    target = folder / check_file_name(name)
    if not target.resolve().is_relative_to(folder.resolve()):
        raise ManifestError(f"file name {name!r} resolves outside {folder}: the manifest was tampered with")
    return target


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
    def from_json(cls, data: bytes) -> ShardManifest:
        """Parse and check a manifest; a torn one, one of the wrong shape or one naming a file outside
        its folder raises :class:`ManifestError` (a ValueError, so restore falls back or fails cleanly)."""
        try:
            raw = json.loads(data)
            version, shard, metadata = raw["version"], raw["shard"], raw.get("metadata", {})
            files = tuple(_file_entry(f) for f in raw["files"])
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ManifestError(f"not a shard manifest: {exc}") from exc
        if type(version) is not int or type(shard) is not int or shard < 0 or not isinstance(metadata, dict):
            raise ManifestError(f"not a shard manifest: version {version!r}, shard {shard!r}")
        return cls(version, shard, files, metadata)


def _file_entry(raw: dict) -> FileEntry:
    name, size, sha = check_file_name(raw["name"]), raw["size"], raw["sha256"]
    if type(size) is not int or size < 0 or not isinstance(sha, str) or not _SHA256.match(sha):
        raise ManifestError(f"file {name!r}: size {size!r} or sha256 {sha!r} is malformed")
    return FileEntry(name, size, sha)


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
    def for_manifests(cls, version: int, manifests: list[ShardManifest]) -> CommitMarker:
        return cls(version, tuple(hashlib.sha256(m.to_json()).hexdigest() for m in manifests))

    def to_json(self) -> bytes:
        return json.dumps(
            {"version": self.version, "manifest_sha256": list(self.manifest_sha256), "created": self.created}
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> CommitMarker:
        """Parse a marker; a torn or foreign file raises ValueError."""
        try:
            raw = json.loads(data)
            shas = raw["manifest_sha256"]
            if not isinstance(shas, list) or not all(isinstance(s, str) for s in shas):
                raise TypeError(f"manifest_sha256 is {shas!r}")
            return cls(int(raw["version"]), tuple(shas), float(raw["created"]))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ManifestError(f"not a commit marker: {exc}") from exc
