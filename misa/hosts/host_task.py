"""What a state host runs: one long task of the hosts' barrier job, on an executor.

The task opens its partition's state (a :class:`~misa.parallel.worker.PartitionWorker`) in a local folder of its
executor, serves it over Arrow Flight (:mod:`.server`), waits at the barrier until every host is up
(``BarrierTaskContext.allGather``), reports its address to the driver's registry, and serves until the driver
asks it to close. A failure to start is reported to the driver instead of an address.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Client
from pathlib import Path
from typing import Iterator

from misa.config import MisaConfig
from misa.hosts.server import HostTables, StateHostServer
from misa.parallel.worker import PartitionWorker, portable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostLaunch:
    """What every host of one launch is given: the config, the operator (pickled), each partition's DFS location,
    the working folder's root on the executors (empty: the executor's temporary folder), the driver's registry
    and its key, and the launch's id (its hosts' folders are its own)."""

    config: MisaConfig
    operator: bytes
    dfs_urls: tuple[str, ...]
    local_root: str
    registry: tuple[str, int]
    key: bytes
    launch_id: str


@dataclass(frozen=True)
class HostAddress:
    """A running host: its partition, Flight location, executor host and process id."""

    partition: int
    location: str
    host: str
    pid: int


def host_folder(launch: HostLaunch, partition: int) -> Path:
    """The partition's working folder on this executor: below the configured root or the temporary folder, one per
    state (its DFS location) and launch, so a host started while an older one still stops never shares its files."""
    root = Path(launch.local_root or tempfile.gettempdir()) / "misa-state-hosts"
    state = hashlib.sha1(launch.dfs_urls[0].encode()).hexdigest()[:12]
    return root / state / launch.launch_id / f"partition-{partition}"


def run_host(launch: HostLaunch, _rows: Iterator[object]) -> Iterator[HostAddress]:
    """The barrier task's body (``mapPartitions``): serve this task's partition until closed."""
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    partition = context.partitionId()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s %(levelname)s [state host {partition}] %(message)s"
    )
    executor_host = context.getTaskInfos()[partition].address.rsplit(":", 1)[0]
    folder = host_folder(launch, partition)
    tables = HostTables()
    try:
        worker = PartitionWorker(launch.config, str(folder), launch.dfs_urls[partition], launch.operator, tables)
        # on the address the driver reaches this executor at, not on every interface of the machine
        server = StateHostServer(f"grpc+tcp://{executor_host}:0", worker, tables, launch.key)
    except Exception as exc:  # noqa: BLE001 - goes to the driver, which raises it
        context.allGather("failed")
        _report(launch, ("error", partition, portable(exc)))
        return iter(())
    address = HostAddress(partition, f"grpc+tcp://{executor_host}:{server.port}", executor_host, os.getpid())
    context.allGather(address.location)  # every host is up before any reports
    _report(launch, ("ok", partition, address))
    log.info("serving partition %d at %s (pid %d, folder %s)", partition, address.location, address.pid, folder)
    try:
        server.closed.wait()
    finally:
        server.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    return iter(())


def _report(launch: HostLaunch, message: tuple[object, ...]) -> None:
    with Client(launch.registry, authkey=launch.key) as registry:
        registry.send(message)
