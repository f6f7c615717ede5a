"""The storage regimes of ``misa bench live``: a remote DFS, a slow state volume, a Redis on another host.

Each regime is set up before the runs and torn down after them (also when a run fails or the bench
is interrupted), with the project's tools (``../shared/tools``: ``remote-dfs``, ``slow-volume``,
``latency-proxy``; they need root)::

    with Regimes() as regimes:
        dfs = regimes.enter("dfs", RemoteDfs(tools, delay="10ms"))
        ...

A tool's file system that is already up with the same parameters is used as it is and left up (another
benchmark may be using it); one up with other parameters is an error naming both. What each regime
was is recorded (:meth:`Regime.record`) in every row of the output and in the table's header.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from bench.exceptions import RegimeError
from misa.config_forms import parse_bytes, parse_seconds
from services.ports import free_port

DEFAULT_TOOLS = Path(__file__).resolve().parents[2] / "shared" / "tools"


class Regime(Protocol):
    """One regime: set up, described, torn down."""

    def up(self) -> None: ...

    def down(self) -> None: ...

    def record(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=Regime)


def run_tool(argv: list[str]) -> str:
    """Run a tool; its stdout, or a :class:`RegimeError` with the command and its last error line."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise RegimeError(f"{argv[0]} not found: give the tools' folder with --tools") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        raise RegimeError(f"{' '.join(argv)} failed (exit {done.returncode}): {last}")
    return done.stdout


def same_duration(a: str, b: str) -> bool:
    """Whether two durations (``10ms``, ``0.01s``) are the same."""
    return abs(parse_seconds(a) - parse_seconds(b)) < 1e-9


def same_size(a: str, b: str) -> bool:
    """Whether two sizes or rates without their ``/s`` (``125m``, ``128000k``) are the same."""
    return parse_bytes(a.lower().removesuffix("/s")) == parse_bytes(b.lower().removesuffix("/s"))


class HostTool:
    """A tool of ../shared/tools that keeps one instance per host (``TOOL up|status|down``): :meth:`up` reuses
    one already up with this regime's parameters (and leaves it up), refuses one up with others, and
    brings one up (and, at :meth:`down`, down) only when there is none."""

    name: str  # the tool's file name
    status_pattern: str  # what ``TOOL status`` prints when it is up, its parameters as groups

    tools: Path
    mount: Path
    owned: bool  # set up by this bench (and so torn down by it)

    def up_args(self) -> list[str]:
        """The options of ``TOOL up``."""
        raise NotImplementedError

    def mismatch(self, found: re.Match) -> str | None:
        """How the instance that is up (its status, parsed) differs from this regime's parameters; None if not."""
        raise NotImplementedError

    def command(self, verb: str) -> list[str]:
        return [str(self.tools / self.name), verb, *(self.up_args() if verb == "up" else [])]

    def up(self) -> None:
        status = run_tool(self.command("status")).strip()
        found = re.fullmatch(self.status_pattern, status)
        if status == "down":
            run_tool(self.command("up"))
            self.owned = True
        elif not found:
            raise RegimeError(f"{self.name} status said {status!r}: expected 'down' or 'up: ...'")
        elif difference := self.mismatch(found):
            raise RegimeError(
                f"{self.name} is up {difference}: run the bench with those, or bring it down ({self.name} down) "
                "once nothing uses it"
            )

    def down(self) -> None:
        if self.owned:
            run_tool(self.command("down"))
            self.owned = False


@dataclass
class RemoteDfs(HostTool):
    """``remote-dfs``: Spark's checkpoint and the durable state on an sshfs mount behind a shaped link with a
    one-way ``delay`` each way (a DFS or an object store in another zone: round trip twice the delay)."""

    name = "remote-dfs"
    status_pattern = r"up: (\S+) at (\S+), one-way delay (\S+)"

    tools: Path
    delay: str
    rate: str = "400mbit"
    mount: Path = Path("/mnt/misa-dfs")
    owned: bool = False

    def up_args(self) -> list[str]:
        return ["--mount", str(self.mount), "--rate", self.rate, "--delay", self.delay]

    def mismatch(self, found: re.Match) -> str | None:
        mount, rate, delay = found.groups()
        if Path(mount) == self.mount and rate.lower() == self.rate.lower() and same_duration(delay, self.delay):
            return None
        return f"at {mount} with {rate} and a {delay} delay, not {self.mount} with {self.rate} and {self.delay}"

    def record(self) -> dict[str, Any]:
        delay_ms = parse_seconds(self.delay) * 1000
        return {"mount": str(self.mount), "rate": self.rate, "one_way_delay_ms": delay_ms, "rtt_ms": 2 * delay_ms}

    def describe(self) -> str:
        r = self.record()
        return f"DFS: remote-dfs at {r['mount']}, {self.rate}, {r['rtt_ms']:g} ms round trip"


@dataclass
class SlowVolume(HostTool):
    """``slow-volume``: a throttled loop device (a network block volume such as gp3: 3,000 IOPS, 125 MB/s)
    for the working state and Spark's local dir."""

    name = "slow-volume"
    status_pattern = r"up: (\S+) \((\d+) read IOPS, (\d+) write IOPS, (\S+)/s\)"

    tools: Path
    mount: Path = Path("/mnt/misa-slow-volume")
    read_iops: int = 3000
    write_iops: int = 3000
    bps: str = "125m"
    size: str = "20G"
    owned: bool = False
    device: str = ""  # the loop device's name in /proc/diskstats, once up

    def up_args(self) -> list[str]:
        return ["--mount", str(self.mount), "--size", self.size, "--read-iops", str(self.read_iops),
                "--write-iops", str(self.write_iops), "--bps", self.bps]  # fmt: skip

    def mismatch(self, found: re.Match) -> str | None:
        mount, reads, writes, bps = found.groups()
        if (Path(mount), int(reads), int(writes)) == (self.mount, self.read_iops, self.write_iops) and same_size(
            bps, self.bps
        ):
            return None
        return (
            f"at {mount} with {reads}/{writes} read/write IOPS and {bps}/s, not {self.mount} with "
            f"{self.read_iops}/{self.write_iops} and {self.bps}/s"
        )

    def up(self) -> None:
        super().up()
        self.device = mounted_device(self.mount)

    def record(self) -> dict[str, Any]:
        return {"mount": str(self.mount), "read_iops": self.read_iops, "write_iops": self.write_iops,
                "bps": self.bps, "device": self.device}  # fmt: skip

    def describe(self) -> str:
        return (
            f"state volume: slow-volume at {self.mount} ({self.device or '?'}), {self.read_iops} read / "
            f"{self.write_iops} write IOPS, {self.bps}/s"
        )


def mounted_device(mount: Path) -> str:
    """The block device mounted at ``mount``, as /proc/diskstats names it (``loop3``)."""
    source = run_tool(["findmnt", "-no", "SOURCE", str(mount)]).strip()
    if not source.startswith("/dev/"):
        raise RegimeError(f"{mount} is mounted from {source!r}, not a block device")
    return Path(source).name


def device_reads(device: str, diskstats: Path = Path("/proc/diskstats")) -> int:
    """Reads completed by ``device`` since boot (the first counter of its /proc/diskstats line)."""
    for line in diskstats.read_text().splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[2] == device:
            return int(fields[3])
    raise RegimeError(f"{device} is not in {diskstats}")


@dataclass
class DiskSampler:
    """Samples a device's read counter in the background: (wall-clock time, reads) pairs."""

    device: str
    interval_s: float = 0.25
    samples: list[tuple[float, int]] = field(default_factory=list)

    def sample(self) -> None:
        self.samples.append((time.time(), device_reads(self.device)))

    def reads_between(self, start: float, end: float) -> float:
        """Reads in [start, end], linearly interpolated between the samples around each end."""
        if len(self.samples) < 2:
            return 0.0
        times, counts = zip(*self.samples)
        return float(np.interp(end, times, counts) - np.interp(start, times, counts))


@dataclass
class RedisProxy:
    """``latency-proxy`` in front of a Redis: a Redis on "another host", a one-way ``delay`` each way."""

    tools: Path
    delay: str
    target_port: int
    listen_port: int = 0  # 0: a free port, chosen at set-up
    process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [str(self.tools / "latency-proxy"), "--listen", f"127.0.0.1:{self.listen_port}",
                "--to", f"127.0.0.1:{self.target_port}", "--delay", self.delay]  # fmt: skip

    def up(self) -> None:
        self.listen_port = self.listen_port or free_port()
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            if self.process.poll() is not None:
                error = self.process.stderr.read().decode(errors="replace").strip() if self.process.stderr else ""
                self.process = None
                raise RegimeError(f"latency-proxy ended at start: {(error.splitlines() or [''])[-1]}")
            try:
                socket.create_connection(("127.0.0.1", self.listen_port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.down()
                    raise RegimeError(
                        f"latency-proxy did not listen on 127.0.0.1:{self.listen_port} within 10 s"
                    ) from None
                time.sleep(0.05)

    def down(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            if self.process.stderr:
                self.process.stderr.close()
            self.process = None

    def record(self) -> dict[str, Any]:
        delay_ms = parse_seconds(self.delay) * 1000
        return {"one_way_delay_ms": delay_ms, "rtt_ms": 2 * delay_ms, "port": self.listen_port}

    def describe(self) -> str:
        return f"Redis: behind latency-proxy, {self.record()['rtt_ms']:g} ms round trip"


class Regimes:
    """The bench's regimes: each one entered is torn down when the ``with`` block ends, in reverse order,
    whatever ended it (an error, Ctrl-C, SIGTERM: turned into KeyboardInterrupt while the block runs)."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._previous_term: Any = None
        self.entered: dict[str, Regime] = {}

    def enter(self, name: str, regime: R) -> R:
        """Set ``regime`` up; it is torn down when the block ends."""
        regime.up()
        self._stack.callback(regime.down)
        self.entered[name] = regime
        return regime

    def hold(self, context: Any) -> Any:
        """Enter a context manager (a private Redis) that ends with the block."""
        return self._stack.enter_context(context)

    def record(self) -> dict[str, dict[str, Any]]:
        """What each regime was, by name (the output's ``regimes``)."""
        return {name: regime.record() for name, regime in self.entered.items()}

    def __enter__(self) -> Regimes:
        self._previous_term = signal.signal(signal.SIGTERM, _interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._stack.close()
        finally:
            signal.signal(signal.SIGTERM, self._previous_term)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
