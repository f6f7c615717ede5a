"""A private Apache Kafka broker for jobs and tests: one KRaft process (broker and controller) on loopback.

::

    with KafkaBroker() as broker:              # free ports, storage formatted in a temporary folder
        create_topic(broker.bootstrap, "events", partitions=3)   # services.kafka_client

Its jars come from ``.kafka/broker`` (:mod:`services.kafka_install`; nothing is fetched here). :meth:`KafkaBroker.start`
formats the storage (``kafka.tools.StorageTool format --standalone``), starts ``kafka.Kafka``, and returns once a
topic can be created; a broker that does not come up fails with the end of its log. :meth:`KafkaBroker.stop` ends
it (SIGTERM, then SIGKILL) and removes the folder; ``stop(keep_data=True)`` keeps the folder and the ports, and the
next :meth:`~KafkaBroker.start` runs the broker again on them (no new format: its topics, records, offsets and
transactions as they were; a broker down for a while, then back at the same address). A broker started by a test
also gets SIGTERM when the thread that started it dies; a ``detached`` one (``misa kafka up``) outlives its starter
and is stopped by pid (:func:`stop_process`).
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from services.exceptions import KafkaBrokerError
from services.kafka_client import create_topic, delete_topic
from services.kafka_install import BROKER_JARS, ROOT, broker_jars, java_binary
from services.ports import free_port
from services.redis_server import _terminate_with_parent  # the same pre-exec hook as the Redis server's

LOG4J_CONFIG = ROOT / "conf" / "kafka" / "log4j2.properties"
MAIN_CLASS = "kafka.Kafka"
PROBE_TOPIC = "__misa_ready"  # created and deleted once the broker is up
LOG_TAIL_LINES = 20


def cluster_id() -> str:
    """A random KRaft cluster id: 16 bytes in URL-safe base64 without padding, not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def server_properties(data_dir: Path, port: int, controller_port: int) -> str:
    """One combined broker and controller on 127.0.0.1, one replica of everything, small internal topics, records
    kept whatever their timestamps."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Records keep the event times the jobs' generators give them (from 1970 on): no deletion by age (a topic
        # may set retention.ms), and no refusal of a timestamp far ahead of the broker's clock.
        "log.retention.ms": "-1",
        "log.message.timestamp.after.max.ms": str(2**63 - 1),
    }
    return "".join(f"{name}={value}\n" for name, value in settings.items())


class KafkaBroker:
    """A Kafka broker in KRaft mode on free loopback ports, its storage in a temporary folder (module docstring)."""

    def __init__(
        self,
        jars_dir: Path = BROKER_JARS,
        startup_timeout_s: float = 90.0,
        attempts: int = 2,
        heap: str = "512m",
        detached: bool = False,
    ):
        self.jars_dir = jars_dir
        self.startup_timeout_s = startup_timeout_s
        self.attempts = attempts  # another process may take a chosen port before the broker binds it
        self.heap = heap
        self.detached = detached
        self.port: int | None = None
        self.dir: Path | None = None
        self._process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT``, the broker's bootstrap servers (the same while it is stopped with ``keep_data``)."""
        if self.port is None:
            raise KafkaBrokerError("the Kafka broker is not running: use KafkaBroker as a context manager")
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path | None:
        return self.dir / "broker.log" if self.dir is not None else None

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap if self.port is not None else 'not running'})"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> KafkaBroker:
        """Format the storage, start the broker and return once a topic can be created on it; after
        ``stop(keep_data=True)``, start it again on the same folder and ports (no format)."""
        classpath = os.pathsep.join(map(str, broker_jars(self.jars_dir)))
        java = java_binary()
        if self.dir is not None:
            return self._restart(java, classpath)
        self.dir = Path(tempfile.mkdtemp(prefix="misa-kafka-"))
        errors = []
        try:
            for _ in range(self.attempts):
                port, controller_port = _two_free_ports()
                config = self._configure(port, controller_port)
                self._format(java, classpath, config)
                self._launch(java, classpath, config)
                reason = self._wait_ready(port)
                if reason is None:
                    self.port = port
                    return self
                errors.append(f"{reason}; {self._log_tail()}")
                self._terminate()
        except BaseException:
            self.stop()
            raise
        self.stop()
        raise KafkaBrokerError(f"the Kafka broker did not start in {self.attempts} attempts: " + " | ".join(errors))

    def _restart(self, java: str, classpath: str) -> KafkaBroker:
        """The kept broker started again: the same server.properties (folder and ports), once."""
        assert self.dir is not None and self.port is not None
        if self.running:
            raise KafkaBrokerError(f"{self!r} is running: stop it first")
        self._launch(java, classpath, self.dir / "server.properties")
        reason = self._wait_ready(self.port)
        if reason is not None:
            self._terminate()
            raise KafkaBrokerError(
                f"the Kafka broker did not start again on {self.bootstrap}: {reason}; {self._log_tail()}"
            )
        return self

    def _configure(self, port: int, controller_port: int) -> Path:
        """A fresh data folder and the server.properties for these ports."""
        assert self.dir is not None
        data = self.dir / "data"
        shutil.rmtree(data, ignore_errors=True)  # a retry formats anew: the voter set names the controller's port
        config = self.dir / "server.properties"
        config.write_text(server_properties(data, port, controller_port))
        return config

    def _format(self, java: str, classpath: str, config: Path) -> None:
        """``kafka-storage format --standalone``: the data folder of a one-node cluster."""
        quick = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]  # a short-lived tool: starts faster without C2
        command = [java, *quick, "-cp", classpath, "kafka.tools.StorageTool", "format", "--standalone"]
        command += ["--cluster-id", cluster_id(), "--config", str(config)]
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-LOG_TAIL_LINES:])
            raise KafkaBrokerError(f"formatting the Kafka storage failed (exit {result.returncode}): {tail}")

    def _launch(self, java: str, classpath: str, config: Path) -> None:
        assert self.dir is not None and self.log_path is not None
        command = [java, f"-Xmx{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true"]
        command += [f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}", f"-Dmisa.kafka.log={self.log_path}"]
        command += ["-cp", classpath, MAIN_CLASS, str(config)]
        with open(self.dir / "broker.out", "ab") as out:  # the JVM's own output: a crash before logging starts
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=self.detached,
                preexec_fn=None if self.detached else _terminate_with_parent(),
            )

    def _wait_ready(self, port: int) -> str | None:
        """None once a topic can be created on the broker; else why not (it exited, or the timeout passed)."""
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while not _accepts(port):
            if self._process.poll() is not None:
                return f"the broker exited with status {self._process.returncode}"
            if time.monotonic() > deadline:
                return f"no connection on port {port} within {self.startup_timeout_s} s"
            time.sleep(0.1)
        bootstrap = f"127.0.0.1:{port}"
        while True:
            try:
                create_topic(bootstrap, PROBE_TOPIC, timeout_s=5.0)
                delete_topic(bootstrap, PROBE_TOPIC, timeout_s=5.0)
                return None
            except KafkaBrokerError as exc:
                if self._process.poll() is not None:
                    return f"the broker exited with status {self._process.returncode}"
                if time.monotonic() > deadline:
                    return f"no topic could be created within {self.startup_timeout_s} s ({exc})"
                time.sleep(0.2)

    def _log_tail(self) -> str:
        """The last lines of the broker's log and of the JVM's output."""
        lines: list[str] = []
        for path in (self.log_path, self.dir / "broker.out" if self.dir else None):
            if path is not None and path.exists():
                lines += path.read_text(errors="replace").strip().splitlines()[-LOG_TAIL_LINES:]
        return "broker log tail:\n" + "\n".join(lines) if lines else "the broker wrote no log"

    def _terminate(self) -> None:
        if self._process is not None:
            stop_process(self._process.pid, wait=self._process.wait)
            self._process = None

    def stop(self, keep_data: bool = False) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 15 s) and remove its folder; with ``keep_data``, keep the
        folder and the ports for the next :meth:`start`."""
        self._terminate()
        if keep_data and self.dir is not None and self.port is not None:
            return
        self.port = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(pid: int, timeout_s: float = 15.0, wait=None) -> None:
    """SIGTERM ``pid``, SIGKILL it if it still runs after ``timeout_s``; ``wait(timeout)`` reaps a child of ours."""

    def gone(seconds: float) -> bool:
        if wait is not None:
            try:
                wait(seconds)
                return True
            except subprocess.TimeoutExpired:
                return False
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not _alive(pid):
                return True
            time.sleep(0.1)
        return not _alive(pid)

    for sig, seconds in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        if gone(seconds):
            return


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: not gone, and not a zombie (one of our children is reaped here)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:  # not our child
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _two_free_ports() -> tuple[int, int]:
    """Two different free loopback ports: the broker's and the controller's."""
    first = free_port()
    second = free_port()
    while second == first:
        second = free_port()
    return first, second
