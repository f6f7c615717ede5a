"""Versioned local checkpoints of rocksdict DBs: hard-linked RocksDB checkpoints, manifests, markers."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import rocksdict

from common import failpoints

from .digest import file_digest
from .exceptions import CorruptCheckpointError, LinkedPathError
from .fence import Fence, no_fence
from .manifest import (
    COMMITS_DIR,
    CommitMarker,
    FileEntry,
    ShardManifest,
    inside,
    is_shard_dir,
    local_checkpoint_dir,
    manifest_path,
    marker_path,
)

log = logging.getLogger(__name__)


def unlinked(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies below ``root`` with no symbolic link on the way (``path`` itself included), so
    that whatever is done to it stays below ``root``. ``root`` itself may be a link; ``path`` need not exist."""
    relative = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return False
    return os.path.realpath(path) == os.path.normpath(os.path.join(os.path.realpath(root), relative))


def refuse_links(root: str | os.PathLike[str], path: str) -> str:
    """``path`` when :func:`unlinked` holds for it; else :class:`LinkedPathError` naming it."""
    if not unlinked(root, path):
        raise LinkedPathError(
            f"{path} is a symbolic link, or lies below one, under {root}: refusing to follow it (a planted link "
            f"would make this read, write or delete files elsewhere). Remove the link."
        )
    return path


def write_atomically(path: Path, data: bytes, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so a reader or a crash sees the old file or the new one, never half. ``durable``:
    the bytes are fsynced before the rename and the folder after it, so a marker never counts before it is on disk
    (not durable: a file that is rewritten at every start, which a crash may leave old)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        if durable:
            out.flush()
            os.fsync(out.fileno())
    os.replace(tmp, path)
    if not durable:
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalCheckpoints:
    """The local (first) level of the checkpoint hierarchy, rooted at one directory."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)
        # (device, inode, size, mtime) -> sha256: hard links share an inode, so each SST is hashed once.
        self._digests: dict[tuple[int, int, int], str] = {}
        self.guard: Fence = no_fence  # the ownership check (checkpoint.owner): before each marker

    def checkpoint_dir(self, shard: int, version: int) -> Path:
        return self.root / local_checkpoint_dir(shard, version)

    def create_shard(
        self, version: int, shard: int, db: rocksdict.Rdict, metadata: dict, fence: Fence = no_fence
    ) -> ShardManifest:
        """Take a RocksDB checkpoint of ``db`` (flushed by the caller) and write its manifest;
        ``fence`` is called before each of the two."""
        fence()
        target = self.checkpoint_dir(shard, version)
        if target.exists():  # left by a crash or a replaced worker before this version's marker
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        rocksdict.Checkpoint(db).create_checkpoint(str(target))
        failpoints.hit("ckpt.after_local_checkpoint")
        files = tuple(self._entry(target / name) for name in sorted(os.listdir(target)))
        manifest = ShardManifest(version, shard, files, dict(metadata))
        fence()
        write_atomically(self.root / manifest_path(shard, version), manifest.to_json())
        return manifest

    def commit(self, version: int, manifests: list[ShardManifest], fence: Fence = no_fence) -> CommitMarker:
        """Write the local marker of ``version`` (ack 1): every shard's checkpoint is complete."""
        failpoints.hit("ckpt.after_local_manifest")
        fence()
        self.guard()
        marker = CommitMarker.for_manifests(version, manifests)
        write_atomically(self.root / marker_path(version), marker.to_json())
        failpoints.hit("ckpt.after_local_marker")
        return marker

    def forget(self, version: int) -> None:
        """Remove the local marker of ``version``: it no longer counts as committed."""
        (self.root / marker_path(version)).unlink(missing_ok=True)

    def versions(self) -> list[int]:
        """Versions with a local marker, oldest first."""
        commits = self.root / COMMITS_DIR
        if not commits.is_dir():
            return []
        return sorted(int(n) for n in os.listdir(commits) if n.lstrip("-").isdigit())

    def read_marker(self, version: int) -> CommitMarker:
        return CommitMarker.from_json((self.root / marker_path(version)).read_bytes())

    def read_manifest(self, shard: int, version: int) -> ShardManifest:
        return ShardManifest.from_json((self.root / manifest_path(shard, version)).read_bytes())

    def manifests(self, version: int) -> list[ShardManifest]:
        """The shard manifests of a locally committed version, checked against its marker."""
        marker = self.read_marker(version)
        manifests = [self.read_manifest(s, version) for s in range(marker.shards)]
        if CommitMarker.for_manifests(version, manifests).manifest_sha256 != marker.manifest_sha256:
            raise CorruptCheckpointError(f"local manifests of version {version} do not match its marker")
        return manifests

    def problems(self, version: int) -> list[str]:
        """Why the local copy of ``version`` cannot be restored (empty when it is valid)."""
        try:
            manifests = self.manifests(version)
        except (OSError, ValueError, CorruptCheckpointError) as exc:
            return [f"version {version}: {exc}"]
        found = []
        for manifest in manifests:
            folder = self.checkpoint_dir(manifest.shard, version)
            for entry in manifest.files:
                path = folder / entry.name
                if not path.is_file() or path.stat().st_size != entry.size:
                    found.append(f"{path}: missing or wrong size")
                elif self._digest(path) != entry.sha256:
                    found.append(f"{path}: checksum mismatch")
        return found

    def restore_shard(self, version: int, shard: int, dest: Path) -> ShardManifest:
        """Materialize shard ``shard`` of ``version`` into the empty directory ``dest``.

        SST files are immutable and hard-linked; the files RocksDB rewrites are copied.
        """
        manifest = self.read_manifest(shard, version)
        source = self.checkpoint_dir(shard, version)
        dest.mkdir(parents=True, exist_ok=True)
        for entry in manifest.files:
            target = inside(dest, entry.name)
            if entry.name.endswith(".sst"):
                os.link(inside(source, entry.name), target)
            else:
                shutil.copyfile(inside(source, entry.name), target)
        return manifest

    def remember(self, path: Path, sha256: str) -> None:
        """Record the digest of a file that is already verified (for example a downloaded one)."""
        self._digests[self._stat_key(path)] = sha256

    def gc(self, retain: int, keep_from: int | None) -> list[int]:
        """Delete local versions beyond the newest ``retain`` ones, except those >= ``keep_from``
        (not yet durable). Uncommitted leftovers older than the newest marker go too."""
        committed = self.versions()
        keep = set(committed[-retain:]) if retain > 0 else set()
        if keep_from is not None:
            keep |= {v for v in committed if v >= keep_from}
        newest = committed[-1] if committed else None
        removed = []
        for version in self._all_versions():
            in_flight = newest is None or version > newest
            if version in keep or in_flight:
                continue
            self._remove_version(version)
            removed.append(version)
        if removed:
            self._forget_deleted_files()
        return removed

    def _remove_version(self, version: int) -> None:
        """Delete the marker, manifests and checkpoint folders of ``version``; a path that a symbolic link
        leads elsewhere is skipped and logged, never followed."""
        shards = [int(p.name.split("-")[1]) for p in self.root.glob("shard-*") if is_shard_dir(p.name)]
        paths = [self.root / marker_path(version)]
        paths += [p for s in shards for p in (self.root / manifest_path(s, version), self.checkpoint_dir(s, version))]
        for path in paths:
            if not unlinked(self.root, path):
                log.warning("not deleting %s: it is a symbolic link or lies below one", path)
            elif path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def _all_versions(self) -> set[int]:
        found = set(self.versions())
        for ckpt in self.root.glob("shard-*/ckpt/*"):
            if ckpt.name.lstrip("-").isdigit():
                found.add(int(ckpt.name))
        return found

    def _forget_deleted_files(self) -> None:
        live = {self._stat_key(p) for p in self.root.glob("shard-*/ckpt/*/*")}
        self._digests = {k: v for k, v in self._digests.items() if k in live}

    def _entry(self, path: Path) -> FileEntry:
        return FileEntry(path.name, path.stat().st_size, self._digest(path))

    def _digest(self, path: Path) -> str:
        key = self._stat_key(path)
        if key not in self._digests:
            self._digests[key] = file_digest(str(path))[1]
        return self._digests[key]

    @staticmethod
    def _stat_key(path: Path) -> tuple[int, int, int, int]:
        st = path.stat()
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
