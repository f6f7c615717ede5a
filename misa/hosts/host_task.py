"""What a state host runs: one long task of the hosts' job, on an executor.

The task opens its partition's state (a :class:`~misa.parallel.worker.PartitionWorker`) in a local folder of its
executor, serves it over Arrow Flight (:mod:`.server`), reports its address to the driver's registry, and serves until
the driver asks it to close. A failure to start is reported to the driver instead of an address. The tasks are
ordinary ones: Spark runs a lost one again (its executor gone, or the driver killed the attempt of a host that
stopped answering) on an executor with a free slot, and the new attempt reports itself as the partition's new host.
Every host commits to local checkpoints only until the driver's ``claim`` makes it its partition's host: until then
it may be a standby (``spark.misa.state.standbyReplicas``), which never writes the DFS.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
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
    and its key, the launch's id (its hosts' folders are its own), and the hosts per partition (1 + standbys)."""

    config: MisaConfig
    operator: bytes
    dfs_urls: tuple[str, ...]
    local_root: str
    registry: tuple[str, int]
    key: bytes
    launch_id: str
    per_partition: int = 1

    def task_role(self, task: int) -> tuple[int, int]:
        """The key partition and replica of the hosts' job's task ``task``: a partition's hosts are adjacent tasks,
        which Spark's round-robin over its offers puts on different executors where it can; the replica that starts
        as the host (0) rotates with the partition, so the hosts spread over the executors as the standbys do."""
        partition, slot = divmod(task, self.per_partition)
        return partition, (slot - partition) % self.per_partition


@dataclass(frozen=True)
class HostAddress:
    """A running host: its partition, Flight location, executor host, process id, its task attempt (Spark's task
    attempt id: the driver kills it to replace a host that stopped answering) and its replica (its task among the
    partition's; the driver makes any of them the partition's host or a standby)."""

    partition: int
    location: str
    host: str
    pid: int
    task_attempt: int = -1
    replica: int = 0


def host_folder(launch: HostLaunch, partition: int, replica: int, attempt: int) -> Path:
    """The working folder on this executor of the partition's replica ``replica`` for task attempt ``attempt``: below
    the configured root or the temporary folder, one per state (its DFS location), launch, replica and attempt, so a
    host started while an older one still stops never shares its files."""
    root = Path(launch.local_root or tempfile.gettempdir()) / "misa-state-hosts"
    state = hashlib.sha1(launch.dfs_urls[0].encode()).hexdigest()[:12]
    return root / state / launch.launch_id / f"partition-{partition}" / f"replica-{replica}" / f"attempt-{attempt}"


def serve_host(launch: HostLaunch, task: int) -> Iterator[HostAddress]:
    """Serve the partition of the hosts' job's task ``task`` until closed (the driver said it serves:
    :mod:`.seat_task`)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    (partition, replica), attempt = launch.task_role(task), context.taskAttemptId()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s %(levelname)s [state host {partition}] %(message)s"
    )
    executor_host = _address_towards(launch.registry)
    folder = host_folder(launch, partition, replica, attempt)
    shutil.rmtree(folder.parent, ignore_errors=True)  # an earlier attempt's on this executor: it is gone
    tables = HostTables()
    try:
        dfs_url = launch.dfs_urls[partition]
        worker = PartitionWorker(launch.config, str(folder), dfs_url, launch.operator, tables, standby=True)
        # on the address the driver reaches this executor at, not on every interface of the machine
        server = StateHostServer(f"grpc+tcp://{executor_host}:0", worker, tables, launch.key)
    except Exception as exc:  # noqa: BLE001 - goes to the driver, which raises it
        _report(launch, ("error", partition, portable(exc)))
        return iter(())
    location = f"grpc+tcp://{executor_host}:{server.port}"
    address = HostAddress(partition, location, executor_host, os.getpid(), context.taskAttemptId(), replica)
    _report(launch, ("ok", partition, address))
    log.info(
        "serving partition %d (replica %d) at %s (pid %d, attempt %d, folder %s)",
        partition,
        replica,
        location,
        address.pid,
        attempt,
        folder,
    )
    try:
        server.closed.wait()
    finally:
        server.shutdown()
        shutil.rmtree(folder, ignore_errors=True)
    return iter(())


def _address_towards(registry: tuple[str, int]) -> str:
    """This executor's address on the interface that reaches the driver's registry (a UDP socket's route; nothing
    is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(registry)
        return str(probe.getsockname()[0])


def _report(launch: HostLaunch, message: tuple[object, ...]) -> None:
    with Client(launch.registry, authkey=launch.key) as registry:
        registry.send(message)
