"""Starting the state hosts: a background barrier job of one long task per key partition, placed by Spark.

Spark schedules the tasks on executors all at once (barrier mode), fails them together, and tells each task its
executor's address; each host reports its Flight location to the driver's registry (a socket only hosts with the
launch's key can use). The job runs in a thread of its own under a job group, so stopping the hosts is one
cancellation. Before the job starts, the cluster must offer the hosts' slots plus one for the query's tasks:
Spark would otherwise retry the barrier job for minutes before it fails.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
import uuid
from functools import partial
from multiprocessing.connection import Listener
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from misa.config import MisaConfig
from misa.exceptions import ConfigError, StateWorkerError
from misa.hosts.host_task import HostAddress, HostLaunch, run_host

log = logging.getLogger(__name__)
PLACEMENT_KEY = "spark.misa.state.placement"
_POLL_S = 0.5


def task_slots(sc: SparkContext) -> int:
    """The tasks the cluster's registered executors can run at once (cores over ``spark.task.cpus``)."""
    backend = sc._jsc.sc()  # type: ignore[union-attr]
    return int(backend.maxNumConcurrentTasks(backend.resourceProfileManager().defaultResourceProfile()))


def check_cluster(sc: SparkContext, hosts: int, wait_s: float) -> None:
    """Refuse a cluster that cannot hold ``hosts`` hosts and the query's tasks: dynamic allocation on, or fewer than
    ``hosts`` + 1 task slots within ``wait_s`` seconds (executors register after the session starts)."""
    if sc.getConf().get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        raise ConfigError(
            f"{PLACEMENT_KEY}=executors, but spark.dynamicAllocation.enabled=true: the state hosts hold their "
            f"executors for the query's life and Spark's barrier jobs refuse dynamic allocation. Set "
            f"spark.dynamicAllocation.enabled=false and a fixed spark.executor.instances"
        )
    slots = task_slots(sc)
    needed = f"{PLACEMENT_KEY}=executors needs {hosts} task slot(s) for the state hosts (spark.misa.state.processes) "
    needed += "and at least 1 for the query's tasks"
    if sc.master.startswith("local[") and slots < hosts + 1:  # local mode's one executor never grows
        raise ConfigError(
            f"{needed}, but {sc.master} offers {slots}. In local mode use {PLACEMENT_KEY}=driver (the default), or "
            f"more threads (local[N]), or local-cluster[E,C,MB] for real executor processes"
        )
    deadline = time.monotonic() + wait_s
    while slots < hosts + 1 and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        slots = task_slots(sc)
    if slots < hosts + 1:
        raise ConfigError(
            f"{needed}, but the cluster offers {slots} (executor cores / spark.task.cpus) after {wait_s:g} s "
            f"(spark.misa.state.hostStartTimeout). Add executors or cores, or use fewer hosts for a new state"
        )


class HostGroup:
    """The hosts of one launch: started by :meth:`start`, stopped by :meth:`cancel`."""

    def __init__(self, spark: SparkSession, config: MisaConfig, operator: bytes, dfs_urls: list[str]):
        self.sc = spark.sparkContext
        self.config = config
        self.operator = operator
        self.dfs_urls = tuple(dfs_urls)
        self.addresses: list[HostAddress] = []
        self.key = b""  # the running launch's: every call to its hosts carries it
        self._group = ""
        self._job: threading.Thread | None = None
        self._job_error: list[BaseException] = []

    def start(self) -> list[HostAddress]:
        """Start one host per partition and wait until every one reported its address (or a failure)."""
        count = len(self.dfs_urls)
        check_cluster(self.sc, count, self.config.state_host_start_s)
        key = self.key = secrets.token_bytes(32)
        conf = self.sc.getConf()
        driver_host = conf.get("spark.driver.host", "localhost")
        bind = conf.get("spark.driver.bindAddress", driver_host)  # the driver's own interface, as Spark binds
        with Listener((bind, 0), authkey=key) as registry:
            launch = HostLaunch(
                self.config,
                self.operator,
                self.dfs_urls,
                self.config.state_dir,
                (driver_host, registry.address[1]),
                key,
                uuid.uuid4().hex[:12],
            )
            self._group = f"misa-state-hosts-{launch.launch_id}"
            self._job_error = []
            self._job = threading.Thread(target=self._run_job, args=(launch,), name=self._group, daemon=True)
            self._job.start()
            reports = self._gather(registry, count)
        failed = [(p, exc) for status, p, exc in reports if status == "error"]
        if failed:
            self.cancel()
            partition, exc = failed[0]
            exc.add_note(f"(in the state host of partition {partition}, while it started)")
            raise exc
        self.addresses = sorted((address for _, _, address in reports), key=lambda a: a.partition)
        return self.addresses

    def _run_job(self, launch: HostLaunch) -> None:
        """The barrier job (its thread): returns when every host closed, or Spark failed or cancelled it."""
        count = len(self.dfs_urls)
        self.sc.setJobGroup(self._group, f"misa state hosts ({count} key partitions)", interruptOnCancel=True)
        try:
            self.sc.parallelize(range(count), count).barrier().mapPartitions(partial(run_host, launch)).collect()
        except Exception as exc:  # noqa: BLE001 - the hosts' failure, shown by whoever waits for them
            self._job_error.append(exc)

    def _gather(self, registry: Listener, count: int) -> list[tuple[str, int, Any]]:
        """Every host's report, in arrival order; a host that does not report within the start timeout, or a job
        that ends first, fails the start."""
        reports: queue.Queue[tuple[str, int, Any]] = queue.Queue()

        def accept() -> None:
            try:
                for _ in range(count):
                    with registry.accept() as connection:
                        reports.put(connection.recv())
            except OSError:  # the registry closed: the start gave up
                return

        threading.Thread(target=accept, name="misa-host-registry", daemon=True).start()
        got: list[tuple[str, int, Any]] = []
        deadline = time.monotonic() + self.config.state_host_start_s
        while len(got) < count:
            try:
                got.append(reports.get(timeout=_POLL_S))
                continue
            except queue.Empty:
                pass
            if self._job_error or time.monotonic() > deadline:
                self.cancel()
                cause = self._job_error[0] if self._job_error else None
                raise StateWorkerError(
                    f"{count - len(got)} of {count} state host(s) did not start "
                    + (
                        f"(Spark failed their barrier job: {str(cause).splitlines()[0]})"
                        if cause
                        else f"within {self.config.state_host_start_s:g} s (spark.misa.state.hostStartTimeout)"
                    )
                    + ": see the executors' logs"
                ) from cause
        return got

    def cancel(self) -> None:
        """Stop the hosts' barrier job (its tasks are killed) and wait for it to end."""
        if self._job is None:
            return
        self.sc.cancelJobGroup(self._group)
        self.join()

    def join(self) -> None:
        """Wait for the hosts' job to end (every host closed, or the job was cancelled)."""
        if self._job is not None:
            self._job.join(30.0)
            self._job = None
