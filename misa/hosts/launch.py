"""Starting the state hosts, and a new host for a partition whose host was lost: a background job of one long task
per key partition, placed by Spark.

Each task reports its host's Flight location to the driver's registry (a socket only hosts with the launch's key can
use), which stays open while the hosts run. When a host is lost, Spark runs its task again (an executor lost) or the
driver kills the task attempt of a host that stopped answering, and Spark runs it again: either way the new attempt
reports, and :meth:`HostGroup.replacement` hands it over. A task that starts after the start asks first whether it
serves (:mod:`.seats`); one that left is started again in a job of its own when there is room. The jobs run in
threads of their own under one job group, so stopping the hosts is one cancellation. Before the first job starts,
the cluster must offer the hosts' slots plus one for the query's tasks.
"""

from __future__ import annotations

import logging
import pickle
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
from misa.hosts.host_task import HostAddress, HostLaunch
from misa.hosts.seat_task import run_task
from misa.hosts.seats import Held, Seats

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
    needed = f"{PLACEMENT_KEY}=executors needs {hosts} task slot(s) for the state hosts (spark.misa.state.processes "
    needed += "times 1 + spark.misa.state.standbyReplicas) "
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
        self.per_partition = 1 + config.state_standby_replicas
        self.key = b""  # the running launch's: every call to its hosts carries it
        self._group = ""
        self._jobs: list[threading.Thread] = []
        self._job_error: list[BaseException] = []
        self._registry: Listener | None = None
        self._reports: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        self._fresh: dict[int, list[HostAddress]] = {}  # hosts that reported and were not taken yet, by partition
        self._fresh_lock = threading.Lock()  # the registry's thread counts them
        self._launch: HostLaunch | None = None
        self.seats = self._new_seats()

    def _new_seats(self) -> Seats:
        """A launch's seats: every task serves until :meth:`open_seats`."""
        return Seats(self.per_partition, lambda task: divmod(task, self.per_partition), lambda: task_slots(self.sc))

    def open_seats(self, held: Held) -> None:
        """The hosts started: from now on a starting task serves only where the seats want it (``held``: what the
        pool's hosts hold)."""

        def with_fresh() -> tuple[dict[int, int], int]:
            standbys, serving = held()
            with self._fresh_lock:
                fresh = {p: len(waiting) for p, waiting in self._fresh.items()}
            every = set(standbys) | set(fresh)
            return {p: standbys.get(p, 0) + fresh.get(p, 0) for p in every}, serving + sum(fresh.values())

        self.seats.held = with_fresh

    def start(self) -> list[HostAddress]:
        """Start 1 + standbyReplicas hosts per partition and wait until every one reported its address (or a
        failure); each partition's first host (the others wait to be taken as standbys, :meth:`fresh`)."""
        count = len(self.dfs_urls) * self.per_partition
        check_cluster(self.sc, count, self.config.state_host_start_s)
        key = self.key = secrets.token_bytes(32)
        conf = self.sc.getConf()
        driver_host = conf.get("spark.driver.host", "localhost")
        bind = conf.get("spark.driver.bindAddress", driver_host)  # the driver's own interface, as Spark binds
        self._registry = registry = Listener((bind, 0), authkey=key)
        self._reports = queue.Queue()
        self.seats = self._new_seats()
        threading.Thread(
            target=self._accept, args=(registry, self._reports, self.seats), name="misa-host-registry", daemon=True
        ).start()
        self._launch = launch = HostLaunch(
            self.config,
            self.operator,
            self.dfs_urls,
            self.config.state_dir,
            (driver_host, registry.address[1]),
            key,
            uuid.uuid4().hex[:12],
            self.per_partition,
        )
        self._group = f"misa-state-hosts-{launch.launch_id}"
        self._job_error = []
        self._jobs = []
        with self._fresh_lock:
            self._fresh = {}
        self._run_tasks(list(range(len(self.dfs_urls) * self.per_partition)))
        while (started := sum(map(len, self._fresh.values()))) < count:
            self._next_report(f"{count - started} of {count} state host(s) did not start")
        return [self._take_first(p) for p in range(len(self.dfs_urls))]

    def _take_first(self, partition: int) -> HostAddress:
        """The partition's host of replica 0 (its task's first attempt: the host at start); the others wait."""
        with self._fresh_lock:
            first = min(self._fresh[partition], key=lambda a: a.replica)
            self._fresh[partition].remove(first)
        return first

    def replacement(self, lost: HostAddress) -> HostAddress:
        """The new host of ``lost``'s partition: its task attempt is killed (a host that stopped answering; one whose
        executor is gone is run again by Spark anyway), and the next report of one of the partition's tasks is
        awaited."""
        self.kill(lost, f"misa: the state host of partition {lost.partition} was lost; its partition moves")
        again = self.seats.awaiting(lost.partition)
        if again:
            self._run_tasks(again)
        try:
            while True:
                address = self.fresh(lost.partition)
                if address is not None and address.task_attempt != lost.task_attempt:
                    return address
                self._next_report(f"no new state host for partition {lost.partition}")
        finally:
            self.seats.found(lost.partition)

    def fresh(self, partition: int) -> HostAddress | None:
        """A host of ``partition`` that reported since and was not taken yet (a task Spark ran again), or None."""
        self._drain_reports()
        with self._fresh_lock:
            waiting = self._fresh.get(partition, [])
            return waiting.pop(0) if waiting else None

    def start_again(self) -> None:
        """Start again the tasks that left (:mod:`.seats`) that the partitions lack and the cluster has room for."""
        tasks = self.seats.to_start_again()
        if tasks:
            log.info("the state hosts' tasks %s start again (standbys their partitions lack)", tasks)
            self._run_tasks(tasks)

    def kill(self, host: HostAddress, why: str) -> None:
        """Kill ``host``'s task attempt (Spark runs the task again; nothing when it already ended)."""
        try:
            self.sc._jsc.sc().killTaskAttempt(host.task_attempt, True, why)  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001 - the attempt already ended (its executor is gone)
            log.debug("task attempt %d of partition %d was not running", host.task_attempt, host.partition)

    def executors(self, hosts: list[HostAddress]) -> dict[int, str]:
        """The executor each of ``hosts`` runs on, by task attempt (those Spark's scheduler knows as running)."""
        attempts = {a.task_attempt for a in hosts}
        found = {}
        try:
            running = self.sc._jsc.sc().taskScheduler().taskIdToExecutorId().iterator()  # type: ignore[union-attr]
            while running.hasNext():
                entry = running.next()
                if int(entry._1()) in attempts:
                    found[int(entry._1())] = str(entry._2())
        except Exception:  # noqa: BLE001 - the scheduler's map changed while read: the caller looks again later
            log.debug("the running tasks' executors could not be read", exc_info=True)
        return found

    def decommissioning(self, hosts: list[HostAddress]) -> set[int]:
        """The task attempts of those of ``hosts`` whose executor Spark is decommissioning (a node drain, a spot
        reclaim, with ``spark.decommission.enabled``): Spark gives it no new task, and it leaves once its tasks end.
        Without that setting none is (and Spark's running tasks are not read: this runs before every sending)."""
        if self.sc.getConf().get("spark.decommission.enabled", "false").lower() != "true":
            return set()
        scheduler = self.sc._jsc.sc().taskScheduler()  # type: ignore[union-attr]
        running = self.executors(hosts)
        leaving = {e for e in set(running.values()) if scheduler.getExecutorDecommissionState(e).isDefined()}
        return {task for task, executor in running.items() if executor in leaving}

    def leftovers(self) -> list[HostAddress]:
        """Every host that reported and was never taken (to be closed with the others)."""
        self._drain_reports()
        with self._fresh_lock:
            hosts = [a for waiting in self._fresh.values() for a in waiting]
            self._fresh = {}
        return hosts

    def _accept(self, registry: Listener, reports: queue.Queue, seats: Seats) -> None:
        """Answer every starting task whether it serves (``seats``), and put every host's report in ``reports``,
        until the registry closes."""
        while True:
            try:
                with registry.accept() as connection:
                    message = connection.recv()
                    if message[0] == "starting":
                        connection.send(seats.serves(message[1]))
                    else:
                        reports.put(message)
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
            self._keep(status, partition, value)
            return

    def _drain_reports(self) -> None:
        """Keep the reports that came in, without waiting."""
        while True:
            try:
                self._keep(*self._reports.get_nowait())
            except queue.Empty:
                return

    def _keep(self, status: str, partition: int, value: Any) -> None:
        """Keep a host's report: its address as one of its partition's hosts not yet taken; a failure to start
        stops the hosts and is raised."""
        if status == "error":
            self.cancel()
            value.add_note(f"(in the state host of partition {partition}, while it started)")
            raise value
        with self._fresh_lock:
            self._fresh.setdefault(partition, []).append(value)

    def _run_tasks(self, tasks: list[int]) -> None:
        """Run the hosts' job's ``tasks`` (all of them at the start; some started again later) as a job of their own,
        in a thread that returns when every one closed, or Spark failed or cancelled the job."""
        first = not self._jobs
        count = len(self.dfs_urls)
        about = f"misa state hosts ({count} key partitions, {self.per_partition - 1} standby(s) each)"
        if not first:
            about = f"misa state hosts started again (tasks {tasks})"
        launch = self._launch
        assert launch is not None
        body = partial(run_task, launch.registry, launch.key, pickle.dumps(launch))

        def run() -> None:
            self.sc.setJobGroup(self._group, about, interruptOnCancel=True)
            try:
                self.sc.parallelize(tasks, len(tasks)).mapPartitions(body).collect()
            except Exception as exc:  # noqa: BLE001 - the hosts' failure, shown by whoever waits for them
                if first:
                    self._job_error.append(exc)
                else:  # its partitions keep their hosts: it is started again when there is room
                    log.warning("%s failed: %s", about, str(exc).splitlines()[0] if str(exc) else exc)

        job = threading.Thread(target=run, name=self._group, daemon=True)
        self._jobs.append(job)
        job.start()

    def cancel(self) -> None:
        """Stop the hosts' job (its tasks are killed) and wait for it to end."""
        if not self._jobs:
            return
        self.sc.cancelJobGroup(self._group)
        self.join()

    def join(self) -> None:
        """Wait for the hosts' job to end (every host closed, or the job was cancelled); close the registry."""
        for job in self._jobs:
            job.join(30.0)
        self._jobs = []
        registry, self._registry = self._registry, None
        if registry is not None:
            registry.close()
