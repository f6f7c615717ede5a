"""Starting the state hosts, and a new host for a partition whose host was lost: a background job of one long task
per key partition, placed by Spark.

Each task reports its host's Flight location to the driver's registry (a socket only hosts with the launch's key can
use), which stays open while the hosts run. When a host is lost, Spark runs its task again (an executor lost) or the
driver kills the task attempt of a host that stopped answering, and Spark runs it again: either way the new attempt
reports, and :meth:`HostGroup.replacement` hands it over. The job runs in a thread of its own under a job group, so
stopping the hosts is one cancellation. Before the job starts, the cluster must offer the hosts' slots plus one for
the query's tasks.
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
    """Refuse a cluster that cannot hold ``hosts`` hosts and the query's tasks: dynamic allocation or speculation on,
    or fewer than ``hosts`` + 1 task slots within ``wait_s`` seconds (executors register after the session starts)."""
    conf = sc.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        raise ConfigError(
            f"{PLACEMENT_KEY}=executors, but spark.dynamicAllocation.enabled=true: the state hosts hold their "
            f"executors for the query's life, and dynamic allocation would count them as busy forever. Set "
            f"spark.dynamicAllocation.enabled=false and a fixed spark.executor.instances"
        )
    if conf.get("spark.speculation", "false").lower() == "true":
        raise ConfigError(
            f"{PLACEMENT_KEY}=executors, but spark.speculation=true: Spark would start second copies of the state "
            f"hosts' long tasks. Set spark.speculation=false (a lost host is replaced by misa, not by speculation)"
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
    """The hosts of one launch: started by :meth:`start`, a lost one replaced by :meth:`replacement`, all stopped by
    :meth:`cancel`."""

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
        self._registry: Listener | None = None
        self._reports: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self._fresh: dict[int, HostAddress] = {}  # hosts that reported and were not taken yet, by partition

    def start(self) -> list[HostAddress]:
        """Start one host per partition and wait until every one reported its address (or a failure)."""
        count = len(self.dfs_urls)
        check_cluster(self.sc, count, self.config.state_host_start_s)
        key = self.key = secrets.token_bytes(32)
        conf = self.sc.getConf()
        driver_host = conf.get("spark.driver.host", "localhost")
        bind = conf.get("spark.driver.bindAddress", driver_host)  # the driver's own interface, as Spark binds
        self._registry = registry = Listener((bind, 0), authkey=key)
        self._reports = queue.Queue()
        threading.Thread(
            target=self._accept, args=(registry, self._reports), name="misa-host-registry", daemon=True
        ).start()
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
        self._fresh = {}
        while len(self._fresh) < count:
            self._next_report(f"{count - len(self._fresh)} of {count} state host(s) did not start")
        self.addresses = [self._fresh.pop(p) for p in range(count)]
        return self.addresses

    def replacement(self, lost: HostAddress) -> HostAddress:
        """The new host of ``lost``'s partition: its task attempt is killed (a host that stopped answering; one whose
        executor is gone is run again by Spark anyway), and the next attempt's report is awaited."""
        try:
            why = f"misa: the state host of partition {lost.partition} was lost; its partition moves to a new host"
            self.sc._jsc.sc().killTaskAttempt(lost.task_attempt, True, why)  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - the attempt already ended (its executor is gone)
            log.debug("task attempt %d of partition %d was not running", lost.task_attempt, lost.partition)
        while True:
            address = self._fresh.pop(lost.partition, None)
            if address is not None and address.task_attempt != lost.task_attempt:
                self.addresses[lost.partition] = address
                return address
            self._next_report(f"no new state host for partition {lost.partition}")

    def decommissioning(self) -> set[int]:
        """The task attempts of the hosts whose executor Spark is decommissioning (a node drain, a spot reclaim, with
        ``spark.decommission.enabled``): Spark gives that executor no new task, and it leaves once its tasks end."""
        hosts = {a.task_attempt for a in self.addresses}
        try:
            scheduler = self.sc._jsc.sc().taskScheduler()  # type: ignore[union-attr]
            running = scheduler.taskIdToExecutorId().iterator()
            leaving: dict[str, bool] = {}
            found = set()
            while running.hasNext():
                entry = running.next()
                task, executor = int(entry._1()), str(entry._2())
                if task in hosts:
                    if executor not in leaving:
                        leaving[executor] = bool(scheduler.getExecutorDecommissionState(executor).isDefined())
                    if leaving[executor]:
                        found.add(task)
            return found
        except Exception:  # noqa: BLE001 - the scheduler's map changed while read: the next batch looks again
            log.debug("the running tasks' executors could not be read", exc_info=True)
            return set()

    def _accept(self, registry: Listener, reports: queue.Queue) -> None:
        """Put every host's report in ``reports`` until the registry closes."""
        while True:
            try:
                with registry.accept() as connection:
                    reports.put(connection.recv())
            except Exception:  # noqa: BLE001 - the registry closed, or a caller without the key or hung up
                if registry is not self._registry:
                    return

    def _next_report(self, failing: str) -> None:
        """Wait for the next host's report and keep its address as its partition's newest host not yet taken; a host
        that failed to start, no report within the start timeout, or a job that ended fails with ``failing`` and
        the cause."""
        deadline = time.monotonic() + self.config.state_host_start_s
        while True:
            try:
                status, partition, value = self._reports.get(timeout=_POLL_S)
            except queue.Empty:
                if self._job_error or time.monotonic() > deadline:
                    self.cancel()
                    cause = self._job_error[0] if self._job_error else None
                    raise StateWorkerError(
                        f"{failing} "
                        + (
                            f"(Spark failed the hosts' job: {str(cause).splitlines()[0]})"
                            if cause
                            else f"within {self.config.state_host_start_s:g} s (spark.misa.state.hostStartTimeout)"
                        )
                        + ": see the executors' logs"
                    ) from cause
                continue
            if status == "error":
                self.cancel()
                value.add_note(f"(in the state host of partition {partition}, while it started)")
                raise value
            self._fresh[partition] = value
            return

    def _run_job(self, launch: HostLaunch) -> None:
        """The hosts' job (its thread): returns when every host closed, or Spark failed or cancelled it."""
        count = len(self.dfs_urls)
        self.sc.setJobGroup(self._group, f"misa state hosts ({count} key partitions)", interruptOnCancel=True)
        try:
            self.sc.parallelize(range(count), count).mapPartitions(partial(run_host, launch)).collect()
        except Exception as exc:  # noqa: BLE001 - the hosts' failure, shown by whoever waits for them
            self._job_error.append(exc)

    def cancel(self) -> None:
        """Stop the hosts' job (its tasks are killed) and wait for it to end."""
        if self._job is None:
            return
        self.sc.cancelJobGroup(self._group)
        self.join()

    def join(self) -> None:
        """Wait for the hosts' job to end (every host closed, or the job was cancelled); close the registry."""
        if self._job is not None:
            self._job.join(30.0)
            self._job = None
        registry, self._registry = self._registry, None
        if registry is not None:
            registry.close()
