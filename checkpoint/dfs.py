"""The DFS (second) level of the checkpoint hierarchy, over any fsspec URL."""

from __future__ import annotations

import logging
import os
import posixpath
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import fsspec

from . import failpoints
from .digest import copy_and_digest
from .fence import Fence, no_fence
from .location import redact
from .manifest import COMMITS_DIR, CommitMarker, FileEntry, ShardManifest, inside, manifest_path, marker_path
from .retry import CorruptCheckpointError, RetryPolicy

log = logging.getLogger(__name__)


class UploadVerificationError(OSError):
    """A file on the DFS does not have the size or digest just written; the upload is retried."""


@dataclass
class UploadStats:
    """What uploading one version moved."""

    version: int
    files_uploaded: int = 0
    files_reused: int = 0
    bytes_uploaded: int = 0
    bytes_reused: int = 0
    seconds: float = 0.0


@dataclass
class VersionInfo:
    """A committed version as ``misa ckpt list`` shows it."""

    version: int
    shards: int
    files: int
    total_bytes: int
    new_bytes: int
    created: float


@dataclass
class GcStats:
    deleted_versions: list[int] = field(default_factory=list)
    deleted_files: int = 0
    deleted_bytes: int = 0


class DfsCheckpoints:
    """Uploads, lists, verifies, restores and garbage-collects versions on a DFS."""

    def __init__(self, url: str, retry: RetryPolicy, threads: int = 4, verify_reads: bool = False):
        self.url = url
        self.shown = redact(url)  # what messages and logs show: credentials masked
        self.fs, self.root = fsspec.core.url_to_fs(url)
        self.retry = retry
        self.threads = max(1, threads)
        self.verify_reads = verify_reads
        self._present: dict[str, int] | None = None  # remote path -> size of files known on the DFS
        self._committed: dict[int, list[ShardManifest]] = {}  # manifests this process committed or read for GC
        self._lock = threading.Lock()
        self._made_dirs: set[str] = set()
        self.guard: Fence = no_fence  # the ownership check (checkpoint.owner): before the marker and GC

    # ------------------------------------------------------------------ paths and small objects
    def _abs(self, relative: str) -> str:
        return posixpath.join(self.root, relative)

    def _write_small(self, relative: str, data: bytes) -> None:
        path = self._abs(relative)
        self._makedirs(posixpath.dirname(path))
        self.retry.call(f"write of {self.shown}/{relative}", lambda: self.fs.pipe_file(path, data))

    def _read_small(self, relative: str) -> bytes:
        return self.retry.call(f"read of {self.shown}/{relative}", lambda: self.fs.cat_file(self._abs(relative)))

    def _makedirs(self, path: str) -> None:
        if path not in self._made_dirs:
            self.retry.call(f"mkdir {path}", lambda: self.fs.makedirs(path, exist_ok=True))
            self._made_dirs.add(path)

    def _ls(self, relative: str) -> list[dict]:
        path = self._abs(relative)

        def attempt() -> list[dict]:
            try:
                return self.fs.ls(path, detail=True, refresh=True)
            except FileNotFoundError:
                return []

        return self.retry.call(f"listing of {self.shown}/{relative}", attempt)

    # ------------------------------------------------------------------ versions
    def committed_versions(self) -> list[int]:
        """Versions with a DFS commit marker, oldest first (markers are not parsed here)."""
        names = (posixpath.basename(e["name"]) for e in self._ls(COMMITS_DIR))
        return sorted(int(n) for n in names if n.lstrip("-").isdigit())

    def read_marker(self, version: int) -> CommitMarker:
        return CommitMarker.from_json(self._read_small(marker_path(version)))

    def newest_durable(self) -> int | None:
        """The newest version whose marker is whole (a torn marker is not a commit)."""
        for version in reversed(self.committed_versions()):
            try:
                self.read_marker(version)
                return version
            except ValueError:
                log.warning("ignoring torn commit marker %s/%s", self.url, marker_path(version))
        return None

    def manifests(self, version: int, cached: bool = False) -> list[ShardManifest]:
        """The shard manifests of a committed version, checked against its marker. ``cached`` reuses
        what this process already read or wrote (committed manifests never change); restore and
        verify always read the DFS."""
        if cached and version in self._committed:
            return self._committed[version]
        marker = self.read_marker(version)
        manifests = [ShardManifest.from_json(self._read_small(manifest_path(s, version))) for s in range(marker.shards)]
        for shard, manifest in enumerate(manifests):
            if (manifest.version, manifest.shard) != (version, shard):
                raise CorruptCheckpointError(
                    f"manifest {manifest_path(shard, version)} on {self.shown} names version {manifest.version}, "
                    f"shard {manifest.shard}: it is damaged or was tampered with"
                )
        if CommitMarker.for_manifests(version, manifests).manifest_sha256 != marker.manifest_sha256:
            raise CorruptCheckpointError(f"manifests of version {version} on {self.shown} do not match its marker")
        self._committed[version] = manifests
        return manifests

    def list_versions(self) -> list[VersionInfo]:
        infos, previous = [], set()
        for version in self.committed_versions():
            try:
                marker, manifests = self.read_marker(version), self.manifests(version)
            except (ValueError, CorruptCheckpointError, FileNotFoundError) as exc:
                log.warning("version %d is damaged: %s", version, exc)
                continue
            files = {f.remote_path(m.shard): f.size for m in manifests for f in m.files}
            new = sum(size for path, size in files.items() if path not in previous)
            infos.append(VersionInfo(version, marker.shards, len(files), sum(files.values()), new, marker.created))
            previous = set(files)
        return infos

    # ------------------------------------------------------------------ upload
    def upload(
        self, version: int, manifests: list[ShardManifest], local_dirs: list[Path], fence: Fence = no_fence
    ) -> UploadStats:
        """Upload the files of ``version`` not yet on the DFS, then its manifests, then its marker (ack 2).
        ``fence`` is called before each file, manifest and the marker are written."""
        started = time.monotonic()
        self.guard()
        stats = UploadStats(version)
        present = self._present_files()
        todo: list[tuple[Path, FileEntry, str]] = []
        for manifest, folder in zip(manifests, local_dirs):
            for entry in manifest.files:
                remote = entry.remote_path(manifest.shard)
                if present.get(remote) == entry.size:
                    stats.files_reused += 1
                    stats.bytes_reused += entry.size
                else:
                    todo.append((folder / entry.name, entry, remote))
        self._parallel(lambda item: self._put(*item, fence), todo)
        stats.files_uploaded = len(todo)
        stats.bytes_uploaded = sum(entry.size for _, entry, _ in todo)
        failpoints.hit("ckpt.after_upload")
        for manifest in manifests:
            fence()
            self._write_small(manifest_path(manifest.shard, version), manifest.to_json())
        failpoints.hit("ckpt.after_manifest")
        fence()
        self.guard()
        self._write_small(marker_path(version), CommitMarker.for_manifests(version, manifests).to_json())
        self._committed[version] = list(manifests)
        failpoints.hit("ckpt.after_dfs_marker")
        stats.seconds = time.monotonic() - started
        return stats

    def _put(self, local: Path, entry: FileEntry, remote: str, fence: Fence = no_fence) -> None:
        path = self._abs(remote)
        self._makedirs(posixpath.dirname(path))

        def attempt() -> None:
            failpoints.hit("dfs.put")
            fence()
            with open(local, "rb") as src, self.fs.open(path, "wb") as dst:
                size, sha = copy_and_digest(src, dst)
            if (size, sha) != (entry.size, entry.sha256):
                raise UploadVerificationError(f"{local} changed while it was uploaded")
            remote_size = self.fs.info(path)["size"]
            if remote_size != entry.size:
                raise UploadVerificationError(f"{remote} has {remote_size} bytes on the DFS, expected {entry.size}")
            if self.verify_reads:
                with self.fs.open(path, "rb") as back:
                    if copy_and_digest(back, None)[1] != entry.sha256:
                        raise UploadVerificationError(f"{remote} read back with a different checksum")

        self.retry.call(f"upload of {local.name} to {self.shown}/{remote}", attempt)
        with self._lock:
            self._present_files()[remote] = entry.size

    def _present_files(self) -> dict[str, int]:
        if self._present is None:
            present: dict[str, int] = {}
            for shard_entry in self._ls(""):
                name = posixpath.basename(shard_entry["name"].rstrip("/"))
                if not name.startswith("shard-"):
                    continue
                for kind in ("sst", "meta"):
                    for e in self._ls(f"{name}/{kind}"):
                        present[f"{name}/{kind}/{posixpath.basename(e['name'])}"] = int(e["size"])
            self._present = present
        return self._present

    # ------------------------------------------------------------------ restore and verify
    def restore_shard(self, version: int, manifest: ShardManifest, dest: Path) -> list[tuple[Path, str]]:
        """Download shard ``manifest.shard`` of ``version`` into ``dest``, verifying every digest."""
        dest.mkdir(parents=True, exist_ok=True)

        def fetch(entry: FileEntry) -> tuple[Path, str]:
            remote = entry.remote_path(manifest.shard)
            target = inside(dest, entry.name)
            partial = target.with_name(f".{entry.name}.download")  # renamed only once its digest matches

            def attempt() -> tuple[int, str]:
                failpoints.hit("dfs.get")
                with self.fs.open(self._abs(remote), "rb") as src, open(partial, "wb") as dst:
                    return copy_and_digest(src, dst)

            size, sha = self.retry.call(f"download of {self.shown}/{remote}", attempt)
            if (size, sha) != (entry.size, entry.sha256):
                partial.unlink(missing_ok=True)
                raise CorruptCheckpointError(
                    f"{self.shown}/{remote} of version {version} is damaged: {size} bytes with sha256 {sha[:16]}, "
                    f"expected {entry.size} bytes with {entry.sha256[:16]}. Restore an older version "
                    f"(misa ckpt list {self.shown})."
                )
            os.replace(partial, target)
            return target, sha

        return self._parallel(fetch, list(manifest.files))

    def verify(self, versions: Iterable[int] | None = None) -> list[str]:
        """Check markers, manifests, sizes and digests; return the problems found (empty when sound)."""
        problems: list[str] = []
        checked: dict[str, str | None] = {}
        for version in versions if versions is not None else self.committed_versions():
            try:
                manifests = self.manifests(version)
            except (ValueError, CorruptCheckpointError, FileNotFoundError) as exc:
                problems.append(f"version {version}: {exc}")
                continue
            entries = [(m.shard, f) for m in manifests for f in m.files]
            fresh = [(s, f) for s, f in entries if f.remote_path(s) not in checked]
            for (s, f), problem in zip(fresh, self._parallel(lambda sf: self._check_file(*sf), fresh)):
                checked[f.remote_path(s)] = problem
            problems += [
                f"version {version}: {checked[f.remote_path(s)]}" for s, f in entries if checked[f.remote_path(s)]
            ]
        return problems

    def _check_file(self, shard: int, entry: FileEntry) -> str | None:
        remote = entry.remote_path(shard)

        def attempt() -> tuple[int, str]:
            with self.fs.open(self._abs(remote), "rb") as src:
                return copy_and_digest(src, None)

        try:
            size, sha = self.retry.call(f"read of {self.shown}/{remote}", attempt)
        except FileNotFoundError:
            return f"{remote} is missing"
        if size != entry.size:
            return f"{remote} has {size} bytes, expected {entry.size}"
        if sha != entry.sha256:
            return f"{remote} fails its checksum"
        return None

    # ------------------------------------------------------------------ retention
    def gc(self, retain: int, fence: Fence = no_fence) -> GcStats:
        """Keep the newest ``retain`` committed versions and every file they reference; delete the
        rest: older versions, manifests without a marker, and orphans of interrupted uploads.
        ``fence`` is called before the first listing and before each delete."""
        fence()
        self.guard()
        stats = GcStats()
        committed = self.committed_versions()
        keep = committed[-retain:] if retain > 0 else []
        if not keep:
            return stats
        referenced = {f.remote_path(m.shard) for v in keep for m in self.manifests(v, cached=True) for f in m.files}
        failpoints.hit("gc.before_delete")
        expired = committed[: len(committed) - len(keep)]
        self.forget(expired, fence)  # markers go first: never a committed version with missing files
        failpoints.hit("gc.after_markers")
        stats.deleted_versions += expired
        doomed: list[str] = []
        present = self._present_files()
        for shard_entry in self._ls(""):
            name = posixpath.basename(shard_entry["name"].rstrip("/"))
            if not name.startswith("shard-"):
                continue
            for e in self._ls(f"{name}/manifest"):
                version = posixpath.basename(e["name"]).removesuffix(".json")
                if not version.lstrip("-").isdigit() or int(version) not in keep:
                    doomed.append(e["name"])
        # Data files: what the first listing found plus what this process uploaded since (no re-listing).
        for relative, size in list(present.items()):
            if relative not in referenced:
                doomed.append(self._abs(relative))
                stats.deleted_files += 1
                stats.deleted_bytes += size
                del present[relative]
        self._delete(doomed, fence)
        return stats

    def forget(self, versions: list[int], fence: Fence = no_fence) -> None:
        """Remove the DFS markers of ``versions`` (a rollback); their files go at the next GC."""
        self._delete([self._abs(marker_path(v)) for v in versions], fence)
        for version in versions:
            self._committed.pop(version, None)

    def _delete(self, paths: list[str], fence: Fence = no_fence) -> None:
        def delete(path: str) -> None:
            fence()

            def attempt() -> None:
                try:
                    self.fs.rm_file(path)
                except FileNotFoundError:
                    pass

            self.retry.call(f"delete of {path}", attempt)

        self._parallel(delete, paths)

    def _parallel(self, fn: Callable, items: list) -> list:
        if len(items) <= 1 or self.threads == 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(self.threads, thread_name_prefix="misa-dfs") as pool:
            return list(pool.map(fn, items))
