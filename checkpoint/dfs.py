"""The DFS (second) level of the checkpoint hierarchy, over any fsspec URL.

Damage cannot spread from one version to the next:

* Before a version's marker is written (ack 2), every file it consists of is checked: a file already
  on the DFS is reused only when a fresh listing shows it with the manifest's size and this process
  has verified it, by uploading it or by reading it back and comparing its SHA-256, and the fields
  of the listing that change when a file is written again (see :data:`CHANGE_FIELDS`) are the same
  as then. So each file is read back at most once per process, and again only after it changed. A
  file that is missing, has another size or fails its digest is uploaded again from the local copy
  (which repairs the older versions that name it too) instead of being reused.
* :meth:`DfsCheckpoints.verify` and :meth:`DfsCheckpoints.file_problems` check what a restore
  checks, as closely as their :class:`Check` says.

A damaged old version never stops a commit: GC keeps it, logs it with its path, and deletes no
data file while it is retained (it may reference any). GC deletes only names this layout writes,
found in a fresh listing; on a local file system it never follows a symbolic link, and no write or
delete goes through one (:func:`checkpoint.local.refuse_links`).
"""

from __future__ import annotations

import enum
import logging
import os
import posixpath
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from common import failpoints
from common.location import redact

from .digest import copy_and_digest
from .exceptions import CorruptCheckpointError, ManifestError, UploadVerificationError
from .fence import Fence, no_fence
from .local import refuse_links, unlinked
from .manifest import (
    COMMITS_DIR,
    SHARD_FOLDERS,
    CommitMarker,
    FileEntry,
    ShardManifest,
    inside,
    is_own_name,
    is_shard_dir,
    manifest_path,
    marker_path,
    shard_dir,
    version_of,
)
from .parallel import parallel_map
from .requests import CountedFileSystem
from .retry import RetryPolicy

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Retention keeps at least this many versions: recovery may roll back one (DESIGN.md section 5).
MIN_RETAIN = 2
#: Fields of a listing entry or ``info()`` that change when a file is written again, by backend: s3fs
#: ``ETag``; gcsfs ``generation``, ``md5Hash``, ``crc32c``; adlfs ``etag``; local and HDFS ``mtime``
#: (local also ``ino``). Those a backend reports, with the size, are a file's fingerprint.
CHANGE_FIELDS = ("size", "ETag", "etag", "generation", "md5Hash", "crc32c", "mtime", "ino")


def check_retain(retain: int) -> int:
    """``retain`` when it keeps at least :data:`MIN_RETAIN` versions; else ValueError saying why."""
    if retain < MIN_RETAIN:
        raise ValueError(
            f"retain must be at least {MIN_RETAIN}, not {retain}: recovery may roll back one version, so the "
            f"version before the newest must stay restorable"
        )
    return retain


class Check(enum.Enum):
    """How closely the files of a version are checked on the DFS."""

    SIZES = "sizes"  # each file is in a fresh listing, with the manifest's size
    UNVERIFIED = "unverified"  # and read back and hashed, unless this process verified it and it is unchanged since
    DIGESTS = "digests"  # and every file is read back and hashed


@dataclass(frozen=True)
class FileProblem:
    """What is wrong with one file on the DFS."""

    remote: str  # its path relative to the DFS root
    text: str
    known: bool  # it was there (it is damaged now), or this process had verified it (it was deleted since)

    def __str__(self) -> str:
        return self.text


@dataclass
class UploadStats:
    """What uploading one version moved."""

    version: int
    files_uploaded: int = 0
    files_reused: int = 0
    files_repaired: int = 0  # uploaded again: damaged on the DFS, or deleted since this process verified them
    bytes_uploaded: int = 0
    bytes_reused: int = 0
    requests: int = 0  # calls to the DFS (listings, writes, size checks, manifests, marker)
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
    """What one GC deleted, and the retained versions it could not read (kept, with every data file)."""

    deleted_versions: list[int] = field(default_factory=list)
    deleted_files: int = 0
    deleted_bytes: int = 0
    damaged: dict[int, str] = field(default_factory=dict)  # version -> why it cannot be read
    requests: int = 0  # calls to the DFS (listings, reads of manifests not cached, deletes)


class DfsCheckpoints:
    """Uploads, lists, verifies, restores and garbage-collects versions on a DFS."""

    def __init__(self, url: str, retry: RetryPolicy, threads: int = 4, verify_reads: bool = False):
        self.url = url
        self.shown = redact(url)  # what messages and logs show: credentials masked
        fs, self.root = fsspec.core.url_to_fs(url)
        self._local = isinstance(fs, LocalFileSystem)  # the only backend here with symbolic links
        self.fs = CountedFileSystem(fs)
        self.retry = retry
        self.threads = max(1, threads)
        self.verify_reads = verify_reads
        # remote path -> fingerprint of each file this process uploaded or read back with the right digest
        self._verified: dict[str, tuple] = {}
        self._committed: dict[int, list[ShardManifest]] = {}  # manifests this process committed or read for GC
        self._lock = threading.Lock()
        self._made_dirs: set[str] = set()
        self.guard: Fence = no_fence  # the ownership check (checkpoint.owner): before the marker and GC

    # ------------------------------------------------------------------ paths and small objects
    def _abs(self, relative: str) -> str:
        return posixpath.join(self.root, relative)

    def _writable(self, path: str) -> str:
        """``path`` when writing or deleting it stays below the root (on a local file system no symbolic
        link leads it elsewhere); else :class:`checkpoint.exceptions.LinkedPathError` naming it."""
        return refuse_links(self.root, path) if self._local else path

    def _write_small(self, relative: str, data: bytes) -> None:
        path = self._writable(self._abs(relative))
        self._makedirs(posixpath.dirname(path))
        self.retry.call(f"write of {self.shown}/{relative}", lambda: self.fs.pipe_file(path, data))

    def _read_small(self, relative: str) -> bytes:
        return self.retry.call(f"read of {self.shown}/{relative}", lambda: self.fs.cat_file(self._abs(relative)))

    def _makedirs(self, path: str) -> None:
        if path not in self._made_dirs:
            self.retry.call(f"mkdir {path}", lambda: self.fs.makedirs(path, exist_ok=True))
            self._made_dirs.add(path)

    def _ls(self, relative: str) -> list[dict]:
        """A fresh listing of the folder ``relative`` (empty when it does not exist). Symbolic links are
        left out and a folder that one leads elsewhere is not listed, both logged: nothing is ever
        reached through a link."""
        path = self._abs(relative)
        if self._local and not unlinked(self.root, path):
            log.warning("not listing %s/%s: it is a symbolic link or lies below one", self.shown, relative)
            return []

        def attempt() -> list[dict]:
            try:
                return self.fs.ls(path, detail=True, refresh=True)
            except FileNotFoundError:
                return []

        kept = []
        for entry in self.retry.call(f"listing of {self.shown}/{relative}", attempt):
            if entry.get("islink") or entry.get("type") == "link":
                log.warning(
                    "skipping symbolic link %s/%s: links are never followed", self.shown, _relative(relative, entry)
                )
            else:
                kept.append(entry)
        return kept

    def _listing(self, folders: tuple[str, ...], shards: Iterable[int] | None = None) -> dict[str, dict]:
        """One fresh listing of the files this layout writes in the shard ``folders`` (of
        :data:`SHARD_FOLDERS`) of ``shards`` (every shard folder when None): relative path -> listing
        entry. Other names and symbolic links are left out."""
        if shards is None:
            roots = [_relative("", e) for e in self._ls("") if e.get("type") == "directory"]
            shard_names = [name for name in roots if is_shard_dir(name)]
        else:
            shard_names = [shard_dir(shard) for shard in sorted(set(shards))]
        places = [f"{shard}/{folder}" for shard in shard_names for folder in folders]
        found: dict[str, dict] = {}
        for place, entries in zip(places, self._parallel(self._ls, places)):
            for entry in entries:
                relative = _relative(place, entry)
                if entry.get("type") == "file" and is_own_name(posixpath.basename(place), posixpath.basename(relative)):
                    found[relative] = entry
        return found

    # ------------------------------------------------------------------ versions
    def committed_versions(self) -> list[int]:
        """Versions with a DFS commit marker, oldest first (markers are not parsed here)."""
        names = (posixpath.basename(e["name"]) for e in self._ls(COMMITS_DIR) if e.get("type") == "file")
        return sorted(v for v in map(version_of, names) if v is not None)

    def read_marker(self, version: int) -> CommitMarker:
        """The marker of ``version``: FileNotFoundError when there is none, ManifestError naming it when torn."""
        return self._read_record(marker_path(version), CommitMarker.from_json)

    def _read_record(self, relative: str, parse: Callable[[bytes], T]) -> T:
        """Read and parse a marker or manifest; a torn one raises :class:`ManifestError` naming its path."""
        data = self._read_small(relative)
        try:
            return parse(data)
        except ManifestError as exc:
            raise ManifestError(f"{self.shown}/{relative} is damaged: {exc}") from exc

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
        manifests = [self._read_manifest(version, shard) for shard in range(marker.shards)]
        if CommitMarker.for_manifests(version, manifests).manifest_sha256 != marker.manifest_sha256:
            raise CorruptCheckpointError(f"manifests of version {version} on {self.shown} do not match its marker")
        self._committed[version] = manifests
        return manifests

    def _read_manifest(self, version: int, shard: int) -> ShardManifest:
        """Shard ``shard``'s manifest of the committed ``version``; CorruptCheckpointError or ManifestError
        naming it when it is missing, torn or names another version or shard."""
        relative = manifest_path(shard, version)
        try:
            manifest = self._read_record(relative, ShardManifest.from_json)
        except FileNotFoundError:
            raise CorruptCheckpointError(f"{self.shown}/{relative} of committed version {version} is missing") from None
        if (manifest.version, manifest.shard) != (version, shard):
            raise CorruptCheckpointError(
                f"manifest {relative} on {self.shown} names version {manifest.version}, shard {manifest.shard}: "
                f"it is damaged or was tampered with"
            )
        return manifest

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
        self,
        version: int,
        manifests: list[ShardManifest],
        local_dirs: list[Path],
        fence: Fence = no_fence,
        before_marker: Callable[[], object] | None = None,
    ) -> UploadStats:
        """Upload the files of ``version`` that the DFS lacks or holds damaged, then its manifests, then its
        marker (ack 2); ``before_marker`` (what else the version's ack 2 must cover) is called just before it.
        A file on the DFS is reused only once verified (see the module docstring); a
        damaged or deleted one is uploaded again from the local copy. ``fence`` is called before each
        file, manifest and the marker are written."""
        started, calls = time.monotonic(), self.fs.calls
        self.guard()
        stats = UploadStats(version)
        found = self._check_files(_files_of(manifests), Check.UNVERIFIED)
        todo: list[tuple[Path, FileEntry, str]] = []
        for manifest, folder in zip(manifests, local_dirs):
            for entry in manifest.files:
                problem = found[entry.remote_path(manifest.shard)]
                if problem is None:
                    stats.files_reused += 1
                    stats.bytes_reused += entry.size
                    continue
                todo.append((folder / entry.name, entry, problem.remote))
                if problem.known:
                    stats.files_repaired += 1
                    log.warning(
                        "%s on %s: uploading it again from version %d's local copy", problem, self.shown, version
                    )
        self._parallel(lambda item: self._put(*item, fence), todo)
        stats.files_uploaded = len(todo)
        stats.bytes_uploaded = sum(entry.size for _, entry, _ in todo)
        failpoints.hit("ckpt.after_upload")

        def write_manifest(manifest: ShardManifest) -> None:
            fence()
            self._write_small(manifest_path(manifest.shard, version), manifest.to_json())

        self._parallel(write_manifest, manifests)
        failpoints.hit("ckpt.after_manifest")
        if before_marker is not None:
            before_marker()
        fence()
        self.guard()
        self._write_small(marker_path(version), CommitMarker.for_manifests(version, manifests).to_json())
        self._committed[version] = list(manifests)
        failpoints.hit("ckpt.after_dfs_marker")
        stats.seconds, stats.requests = time.monotonic() - started, self.fs.calls - calls
        return stats

    def _put(self, local: Path, entry: FileEntry, remote: str, fence: Fence = no_fence) -> None:
        """Upload one file, check the bytes sent and the size on the DFS (and, with ``verify_reads``, its
        digest read back), and remember it as verified."""
        path = self._writable(self._abs(remote))
        self._makedirs(posixpath.dirname(path))

        def attempt() -> dict:
            failpoints.hit("dfs.put")
            fence()
            with open(local, "rb") as src, self.fs.open(path, "wb") as dst:
                size, sha = copy_and_digest(src, dst)
            if (size, sha) != (entry.size, entry.sha256):
                raise UploadVerificationError(f"{local} changed while it was uploaded")
            info = self.fs.info(path)
            if info["size"] != entry.size:
                raise UploadVerificationError(f"{remote} has {info['size']} bytes on the DFS, expected {entry.size}")
            if self.verify_reads and self._hash(remote) != (entry.size, entry.sha256):
                raise UploadVerificationError(f"{remote} read back with a different checksum")
            return info

        info = self.retry.call(f"upload of {local.name} to {self.shown}/{remote}", attempt)
        with self._lock:
            self._verified[remote] = _fingerprint(info)

    # ------------------------------------------------------------------ restore and verify
    def restore(self, version: int, manifests: list[ShardManifest], dests: list[Path]) -> list[tuple[Path, str]]:
        """Download every shard of ``version`` (``manifests[i]`` into ``dests[i]``), all files at once on
        the upload threads, verifying every digest; returns each file's local path and SHA-256. The files
        count as verified for later uploads (their listing is taken once they are all here)."""
        for dest in dests:
            dest.mkdir(parents=True, exist_ok=True)
        files = [(manifest.shard, entry, dest) for manifest, dest in zip(manifests, dests) for entry in manifest.files]
        fetched = self._parallel(lambda item: self._fetch(version, *item), files)
        listing = self._listing(("sst", "meta"), {manifest.shard for manifest in manifests})
        with self._lock:
            for shard, entry, _ in files:
                remote = entry.remote_path(shard)
                info = listing.get(remote)
                if info is not None and int(info["size"]) == entry.size:
                    self._verified[remote] = _fingerprint(info)
        return fetched

    def _fetch(self, version: int, shard: int, entry: FileEntry, dest: Path) -> tuple[Path, str]:
        """Download one file of ``version`` into ``dest``; CorruptCheckpointError when its digest differs."""
        remote = entry.remote_path(shard)
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

    def verify(self, versions: Iterable[int] | None = None, check: Check = Check.SIZES) -> list[str]:
        """Check the markers and manifests of ``versions`` (every committed one by default) and, as closely
        as ``check`` says, their files, from one listing; return the problems found (empty when sound)."""
        found: dict[int, list[str]] = {}
        readable: dict[int, list[ShardManifest]] = {}
        for version in versions if versions is not None else self.committed_versions():
            try:
                readable[version] = self.manifests(version)
            except (ValueError, CorruptCheckpointError, FileNotFoundError) as exc:
                found[version] = [str(exc)]
        files = self._check_files([f for manifests in readable.values() for f in _files_of(manifests)], check)
        for version, manifests in readable.items():
            found[version] = _problems_of(manifests, files)
        return [f"version {version}: {problem}" for version in sorted(found) for problem in found[version]]

    def file_problems(self, manifests: list[ShardManifest], check: Check = Check.UNVERIFIED) -> list[str]:
        """What is wrong with the files ``manifests`` name on the DFS, as closely as ``check`` says (empty
        when a restore would find every one present, of its size and digest)."""
        return _problems_of(manifests, self._check_files(_files_of(manifests), check))

    def _check_files(self, files: list[tuple[int, FileEntry]], check: Check) -> dict[str, FileProblem | None]:
        """The problem of each distinct file of ``files`` (shard, entry) by its remote path, None when it
        is sound, from one fresh listing of their shards' folders and, as ``check`` says, read-backs."""
        wanted = {entry.remote_path(shard): entry for shard, entry in files}
        listing = self._listing(("sst", "meta"), {shard for shard, _ in files})
        found: dict[str, FileProblem | None] = {}
        reads: list[tuple[str, FileEntry, tuple]] = []
        for remote, entry in wanted.items():
            info = listing.get(remote)
            if info is None:
                found[remote] = FileProblem(remote, f"{remote} is missing", remote in self._verified)
            elif int(info["size"]) != entry.size:
                found[remote] = FileProblem(remote, f"{remote} has {info['size']} bytes, expected {entry.size}", True)
            elif check is Check.SIZES or (
                check is Check.UNVERIFIED and self._verified.get(remote) == _fingerprint(info)
            ):
                found[remote] = None
            else:
                reads.append((remote, entry, _fingerprint(info)))
        found.update(zip([r[0] for r in reads], self._parallel(lambda r: self._check_digest(*r), reads)))
        with self._lock:
            for remote, problem in found.items():
                if problem is not None:
                    self._verified.pop(remote, None)
        return found

    def _check_digest(self, remote: str, entry: FileEntry, fingerprint: tuple) -> FileProblem | None:
        """Read ``remote`` back and compare it with ``entry``; when it matches, remember it as verified with
        the ``fingerprint`` its listing had."""
        try:
            size, sha = self.retry.call(f"read of {self.shown}/{remote}", lambda: self._hash(remote))
        except FileNotFoundError:
            return FileProblem(remote, f"{remote} is missing", True)
        if size != entry.size:
            return FileProblem(remote, f"{remote} has {size} bytes, expected {entry.size}", True)
        if sha != entry.sha256:
            return FileProblem(remote, f"{remote} fails its checksum", True)
        with self._lock:
            self._verified[remote] = fingerprint
        return None

    def _hash(self, remote: str) -> tuple[int, str]:
        """Size and SHA-256 of the DFS file ``remote``, read whole (once: callers retry)."""
        with self.fs.open(self._abs(remote), "rb") as src:
            return copy_and_digest(src, None)

    # ------------------------------------------------------------------ retention
    def gc(self, retain: int, fence: Fence = no_fence) -> GcStats:
        """Keep the newest ``retain`` versions that can be read, every damaged one newer than the oldest of
        them, and every file they reference; delete the rest: older versions, manifests without a marker,
        and orphans of interrupted uploads. Only names this layout writes, found in a fresh listing, are
        deleted, never through a symbolic link.

        A retained version that cannot be read (a torn marker or manifest) is logged with its path and
        kept, and while it is, no data file is deleted: it may reference any (the safe choice; its
        readable sibling manifests cannot vouch for the torn one). It never fails the caller.
        ``fence`` is called before the first listing and before each delete."""
        check_retain(retain)
        fence()
        calls = self.fs.calls
        self.guard()
        stats = GcStats()
        try:
            self._collect(retain, fence, stats)
        finally:
            stats.requests = self.fs.calls - calls
        return stats

    def _collect(self, retain: int, fence: Fence, stats: GcStats) -> None:
        """The GC of :meth:`gc`, its outcome in ``stats``."""
        committed = self.committed_versions()
        keep, referenced = self._retained(committed, retain, stats)
        if not keep:
            return
        failpoints.hit("gc.before_delete")
        expired = committed[: len(committed) - len(keep)]
        self.forget(expired, fence)  # markers go first: never a committed version with missing files
        failpoints.hit("gc.after_markers")
        stats.deleted_versions += expired
        doomed: list[str] = []
        for relative, entry in self._listing(("manifest",) if stats.damaged else SHARD_FOLDERS).items():
            folder, name = posixpath.basename(posixpath.dirname(relative)), posixpath.basename(relative)
            if folder == "manifest":
                if version_of(name, ".json") not in keep:
                    doomed.append(relative)
            elif relative not in referenced:
                doomed.append(relative)
                stats.deleted_files += 1
                stats.deleted_bytes += int(entry["size"])
        self._delete([self._abs(relative) for relative in doomed], fence)
        with self._lock:
            for relative in doomed:
                self._verified.pop(relative, None)

    def _retained(self, committed: list[int], retain: int, stats: GcStats) -> tuple[list[int], set[str]]:
        """The versions GC keeps (the newest of ``committed``, down to the ``retain``-th that can be read)
        and the files the readable ones reference. Those that cannot be read go to ``stats.damaged``."""
        kept: list[int] = []
        referenced: set[str] = set()
        readable = 0
        for version in reversed(committed):
            if readable == retain:
                break
            kept.append(version)
            try:
                manifests = self.manifests(version, cached=True)
            except (ValueError, CorruptCheckpointError, FileNotFoundError) as exc:
                stats.damaged[version] = str(exc)
                log.warning("GC keeps damaged version %d, and every data file while it is retained: %s", version, exc)
                continue
            readable += 1
            referenced.update(entry.remote_path(shard) for shard, entry in _files_of(manifests))
        return sorted(kept), referenced

    def forget(self, versions: list[int], fence: Fence = no_fence) -> None:
        """Remove the DFS markers of ``versions`` (a rollback); their files go at the next GC."""
        self._delete([self._abs(marker_path(v)) for v in versions], fence)
        for version in versions:
            self._committed.pop(version, None)

    def _delete(self, paths: list[str], fence: Fence = no_fence) -> None:
        def delete(path: str) -> None:
            fence()
            self._writable(path)

            def attempt() -> None:
                try:
                    self.fs.rm_file(path)
                except FileNotFoundError:
                    pass

            self.retry.call(f"delete of {path}", attempt)

        self._parallel(delete, paths)

    def _parallel(self, fn: Callable, items: list) -> list:
        return parallel_map(fn, items, self.threads, "misa-dfs")


def _relative(folder: str, entry: dict) -> str:
    """The path relative to the DFS root of a listing ``entry`` of the folder ``folder`` (relative too)."""
    return posixpath.join(folder, posixpath.basename(entry["name"].rstrip("/")))


def _fingerprint(info: dict) -> tuple:
    """What a listing entry or ``info()`` says about a file that changes when it is written again."""
    return tuple((name, str(info[name])) for name in CHANGE_FIELDS if name in info)


def _files_of(manifests: list[ShardManifest]) -> list[tuple[int, FileEntry]]:
    return [(manifest.shard, entry) for manifest in manifests for entry in manifest.files]


def _problems_of(manifests: list[ShardManifest], found: dict[str, FileProblem | None]) -> list[str]:
    """The problems ``found`` (by remote path) of the files ``manifests`` name, in their order."""
    problems = (found[entry.remote_path(shard)] for shard, entry in _files_of(manifests))
    return [str(problem) for problem in problems if problem is not None]
