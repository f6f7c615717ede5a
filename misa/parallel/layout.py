"""How many key partitions a state has, and where each partition's working state and DFS copy live.

A state written in the driver's own process has its shards at the state dir and the DFS location themselves. A
state of P partitions (P > 1 worker processes, or P state hosts on the executors, one included) records P in
``partitions.json`` at its DFS location, and partition i lives in ``partition-i`` below both; P is fixed for the
state's life (a key's partition depends on it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from common.location import parse
from misa.config import MisaConfig
from misa.exceptions import ConfigError

PARTITIONS_FILE = "partitions.json"
KEY = "spark.misa.state.processes"


def auto_processes(config: MisaConfig) -> int:
    """The count ``auto`` gives a new state: the driver's cores less one, at least 1, at most the shard count."""
    return max(1, min((os.cpu_count() or 1) - 1, config.state_shards))


def partition_count(config: MisaConfig, state_dir: str | Path, dfs_url: str, auto: int | None = None) -> int:
    """The state's partition count: the one it was written with, else the configured one (``auto``: the given
    count, else :func:`auto_processes`). A configured count other than the state's fails here, naming the key."""
    recorded = recorded_partitions(state_dir, dfs_url)
    wanted = config.state_processes
    if recorded is None:
        return (auto or auto_processes(config)) if wanted is None else wanted
    if wanted not in (None, recorded):
        raise ConfigError(
            f"{KEY}={wanted}, but the state at {parse(dfs_url).given} was written by {recorded} process(es): its keys "
            f"are partitioned {recorded} ways for good. Set {KEY}={recorded} (or auto), or start from a new checkpoint "
            f"location and new state locations to use {wanted}."
        )
    return recorded


def recorded_partitions(state_dir: str | Path, dfs_url: str) -> int | None:
    """The partition count of the state at these locations (1 for a state written in the driver's process);
    None for a new state."""
    recorded = partitions_file(dfs_url)
    if recorded is not None:
        return recorded
    fs, root = parse(dfs_url).filesystem()
    local = Path(state_dir)
    in_one_process = local.is_dir() and any(local.glob("shard-*"))
    return 1 if in_one_process or (fs.exists(root) and fs.ls(root)) else None


def partitions_file(dfs_url: str) -> int | None:
    """The partition count recorded at the DFS location (None: no record, a new state or one process's)."""
    fs, root = parse(dfs_url).filesystem()
    path = f"{root.rstrip('/')}/{PARTITIONS_FILE}"
    if not fs.exists(path):
        return None
    with fs.open(path, "rb") as f:
        return int(json.loads(f.read())["partitions"])


def record_partitions(dfs_url: str, partitions: int) -> None:
    """Write the partition count at the DFS location (before any partition writes there)."""
    fs, root = parse(dfs_url).filesystem()
    fs.makedirs(root, exist_ok=True)
    with fs.open(f"{root.rstrip('/')}/{PARTITIONS_FILE}", "wb") as f:
        f.write(json.dumps({"partitions": partitions}).encode())


def partition_locations(state_dir: str | Path, dfs_url: str, partitions: int) -> list[tuple[str, str]]:
    """Each partition's working state dir and DFS location."""
    dfs = partition_dfs_urls(dfs_url, partitions)
    return [(str(Path(state_dir) / f"partition-{i}"), dfs[i]) for i in range(partitions)]


def partition_dfs_urls(dfs_url: str, partitions: int) -> list[str]:
    """Each partition's DFS location."""
    return [parse(dfs_url).child(f"partition-{i}").url for i in range(partitions)]
