"""Where a state is, which versions it holds durably, and what a version's shards are: the reads' plan, made where
Spark plans the read (before any state is read).

A location is a Spark checkpoint location (its ``misa-state`` folder holds the state's DFS copy, the default place)
or that copy itself. A state of several key partitions (``partitions.json``) has one store per partition below it;
a version is readable when every partition made it durable (its commit marker is on the DFS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkpoint import DfsCheckpoints
from checkpoint.manifest import ShardManifest
from common.location import parse
from misa.config import STATE_FOLDER, MisaConfig
from misa.exceptions import StateSourceError
from misa.parallel.layout import partition_dfs_urls, partitions_file
from misa.state.store import OPERATOR_KEY, OWNER_KEY
from misa.state_source.operator_record import RECORD


@dataclass(frozen=True)
class StateLocation:
    """A state's DFS copy: its root (where the operator is recorded) and each partition's store."""

    root: str
    partitions: tuple[str, ...]

    @property
    def shown(self) -> str:
        return parse(self.root).given


def dfs(url: str) -> DfsCheckpoints:
    """The DFS copy of one store at ``url``, read with misa's default retries."""
    config = MisaConfig()
    return DfsCheckpoints(url, config.retry_policy(), config.upload_threads)


def locate(path: str) -> StateLocation:
    """The state at ``path`` or in its ``misa-state`` folder; a :class:`StateSourceError` saying where it looked."""
    given = parse(path)
    fs, root = given.filesystem()
    if not fs.exists(root):
        raise StateSourceError(f"{given.given} does not exist")
    for location in (given, given.child(STATE_FOLDER)):
        fs, root = location.filesystem()
        if not fs.exists(f"{root.rstrip('/')}/{RECORD}") and not fs.exists(f"{root.rstrip('/')}/_commits"):
            continue
        count = partitions_file(location.url)
        urls = partition_dfs_urls(location.url, count) if count is not None else [location.url]
        return StateLocation(location.url, tuple(urls))
    raise StateSourceError(
        f"{given.given} is not a misa checkpoint: neither it nor its {STATE_FOLDER} folder holds a misa state "
        f"({RECORD} or _commits); give the query's checkpoint location or its state's DFS copy "
        "(spark.misa.checkpoint.dfsUrl)"
    )


def durable_versions(location: StateLocation) -> list[int]:
    """The versions every partition made durable, oldest first."""
    common: set[int] | None = None
    for url in location.partitions:
        versions = set(dfs(url).committed_versions())
        common = versions if common is None else common & versions
    return sorted(common or ())


def pick_version(location: StateLocation, versions: list[int], asked: int | None) -> int:
    """``asked`` (None: the newest durable version) when it is durable; else a :class:`StateSourceError` saying why."""
    if not versions:
        raise StateSourceError(f"{location.shown} holds no durable version yet: read it after the query's first batch")
    if asked is None:
        return versions[-1]
    if asked in versions:
        return asked
    held = (
        f"durable versions: {versions[0]}..{versions[-1]}" if len(versions) > 1 else f"durable version: {versions[0]}"
    )
    if asked > versions[-1]:
        raise StateSourceError(
            f"version {asked} of {location.shown} is not durable (yet): a running query may be writing it; {held}"
        )
    raise StateSourceError(
        f"version {asked} of {location.shown} was removed (spark.misa.state.retainVersions keeps the newest); {held}"
    )


def shard_manifests(url: str, version: int) -> list[ShardManifest]:
    """The manifests of ``version``'s shards in the store at ``url``."""
    return dfs(url).manifests(version)


def operator_metadata(manifest: ShardManifest) -> dict[str, Any]:
    """The operator's metadata stored with a version (what its ``restore`` is given), without misa's own keys."""
    return {k: v for k, v in manifest.metadata.items() if k not in (OWNER_KEY, OPERATOR_KEY)}
