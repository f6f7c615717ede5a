"""A Spark standalone cluster whose workers can be cut off the network: each worker (and the executors it starts) in
a network namespace of its own, with its own address on a bridge that the master and the driver sit on.

``ip netns`` and veth pairs from iproute2 (root needed); the master and workers are PySpark's own ``spark-class``.
A worker's link is taken down (:meth:`NetnsCluster.cut`) and up again (:meth:`NetnsCluster.heal`) while its
processes run: the driver cannot reach its executors, nor they the driver, as with a host cut off a real network.
The file systems stay shared (the DFS is a local folder every process reaches).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark

BRIDGE = "misa-sw-br"
SUBNET = "10.77.0"
DRIVER_IP = f"{SUBNET}.1"
SPARK_CLASS = str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _ip(*args: str, netns: str | None = None) -> str:
    command = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done.stdout


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((DRIVER_IP, 0))
        return int(probe.getsockname()[1])


class NetnsCluster:
    """``workers`` standalone workers of ``cores`` cores and ``memory_mb`` each, worker i in namespace
    ``misa-sw{i}`` at ``10.77.0.{10 + i}``; the master at 10.77.0.1 (the bridge, in the driver's namespace). Its
    processes' logs and the executors' stderr go below ``work``."""

    def __init__(self, workers: int, cores: int, memory_mb: int, work: Path):
        self.workers = workers
        self.cores = cores
        self.memory_mb = memory_mb
        self.work = work
        self.port = 0
        self._processes: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://{DRIVER_IP}:{self.port}"

    def namespace(self, worker: int) -> str:
        return f"misa-sw{worker}"

    def address(self, worker: int) -> str:
        return f"{SUBNET}.{10 + worker}"

    def __enter__(self) -> NetnsCluster:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """The bridge, each worker's namespace and link, the master, then the workers (registered)."""
        self.down()
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{DRIVER_IP}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for i in range(self.workers):
            ns = self.namespace(i)
            _ip("netns", "add", ns)
            _ip("link", "add", f"{ns}-v", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", f"{ns}-v", "master", BRIDGE, "up")
            _ip("addr", "add", f"{self.address(i)}/24", "dev", "eth0", netns=ns)
            _ip("link", "set", "eth0", "up", netns=ns)
            _ip("link", "set", "lo", "up", netns=ns)
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        master = ["org.apache.spark.deploy.master.Master", "--host", DRIVER_IP, "--port", str(self.port)]
        self._start("master", [SPARK_CLASS, *master, "--webui-port", str(_free_port())], DRIVER_IP)
        self._wait_for(lambda: self._reachable(DRIVER_IP, self.port), "the master to listen")
        for i in range(self.workers):
            worker = ["org.apache.spark.deploy.worker.Worker", "--host", self.address(i), "--cores", str(self.cores)]
            worker += ["--memory", f"{self.memory_mb}M", "--work-dir", str(self.work / f"worker-{i}"), self.master_url]
            in_namespace = ["ip", "netns", "exec", self.namespace(i), SPARK_CLASS, *worker]
            self._start(f"worker-{i}", in_namespace, self.address(i))
        log = self.work / "master.log"
        self._wait_for(lambda: log.read_text().count("Registering worker") >= self.workers, "the workers to register")

    def _start(self, name: str, command: list[str], address: str) -> None:
        env = dict(os.environ, SPARK_LOCAL_IP=address, PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1")
        with (self.work / f"{name}.log").open("w") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._processes.append(process)

    @staticmethod
    def _reachable(host: str, port: int) -> bool:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return True
        except OSError:
            return False

    def _wait_for(self, condition: object, what: str, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():  # type: ignore[operator]
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: see {self.work}")
            time.sleep(0.5)

    def cut(self, worker: int) -> None:
        """Take worker ``worker``'s link down: its processes run on, unreachable."""
        _ip("link", "set", "eth0", "down", netns=self.namespace(worker))

    def heal(self, worker: int) -> None:
        """Bring worker ``worker``'s link up again."""
        _ip("link", "set", "eth0", "up", netns=self.namespace(worker))

    def worker_of(self, pid: int) -> int:
        """The worker whose namespace process ``pid`` runs in."""
        name = _ip("netns", "identify", str(pid)).strip()
        if not name.startswith("misa-sw"):
            raise RuntimeError(f"process {pid} runs in no worker's namespace ({name or 'the root namespace'})")
        return int(name.removeprefix("misa-sw"))

    def executor_logs(self) -> str:
        """Every executor's stderr (below the workers' work folders)."""
        return "".join(p.read_text(errors="replace") for p in sorted(self.work.glob("worker-*/app-*/*/stderr")))

    def down(self) -> None:
        """Stop every process of the cluster (the executors with their workers) and remove the links and
        namespaces."""
        for process in self._processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        self._processes = []
        for i in range(self.workers):
            pids = subprocess.run(["ip", "netns", "pids", self.namespace(i)], capture_output=True, text=True).stdout
            for pid in pids.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", self.namespace(i)], capture_output=True)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
