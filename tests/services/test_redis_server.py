"""The private redis-server requires a random password: clients without it are refused, and the
password shows neither on the command line nor in what is printed."""

from __future__ import annotations

import pickle
import socket
import stat
import sys
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from common.location import redact
from services.exceptions import RedisServerError
from services.redis_server import RedisLookup, RedisServer, connect, store_mapping


@pytest.fixture(scope="module")
def server():
    with RedisServer() as running:
        yield running


def inline_command(port: int, command: str) -> bytes:
    """The server's raw reply to one inline command on a fresh, unauthenticated connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(command.encode() + b"\r\n")
        return sock.recv(4096)


def stranger(port: int, password: str | None = None) -> redis.Redis:
    """A client of another local user: the port, perhaps a guessed password (no retries: refusals are final)."""
    return redis.Redis(host="127.0.0.1", port=port, password=password, retry=Retry(NoBackoff(), 0))


def test_a_client_without_the_password_is_refused(server):
    assert inline_command(server.port, "PING").startswith(b"-NOAUTH")
    assert inline_command(server.port, "SET ad-1 campaign-evil").startswith(b"-NOAUTH")  # nobody rewrites the map
    with pytest.raises(redis.AuthenticationError):
        stranger(server.port).ping()
    with pytest.raises(redis.AuthenticationError):
        stranger(server.port, "guess").ping()
    with pytest.raises(RedisServerError, match=r"refused the connection.*give its password in the URL"):
        connect(f"redis://127.0.0.1:{server.port}/0")


def test_the_servers_own_clients_authenticate(server):
    with server.client() as client:
        client.flushall()
        assert store_mapping(client, {"ad-1": "campaign-7"}) == 1
    lookup = RedisLookup(server.url)
    try:
        assert lookup(["ad-1", "ad-2"]) == ["campaign-7", None]
    finally:
        lookup.close()


def test_the_password_is_random_per_server_and_never_shown(server, tmp_path):
    with RedisServer() as other:
        assert len({server.password, other.password}) == 2 and len(other.password) >= 32
    shown = [repr(server), str(server), repr(RedisLookup(server.url))]
    with pytest.raises(RedisServerError) as refused:
        connect(server.url.replace(server.password, "wrong"))
    with pytest.raises(RedisServerError) as unreachable:  # a URL of a server that is not there
        connect(f"redis://:{server.password}@127.0.0.1:1/0")
    shown += [str(refused.value), str(unreachable.value)]
    assert all(server.password not in text for text in shown), shown
    assert repr(server) == f"RedisServer(redis://:***@127.0.0.1:{server.port}/0)"
    assert repr(RedisServer()) == "RedisServer(not running)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_password_is_not_on_the_command_line_and_its_file_is_private(server):
    pid = server._process.pid  # the server process
    assert server.password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()  # any local user can read it
    config = server._dir / "redis.conf"
    assert server.password in config.read_text()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and stat.S_IMODE(server._dir.stat().st_mode) == 0o700


def test_a_pickled_lookup_holds_neither_the_password_nor_a_connection(server):
    """The job records its operator beside the state (for misa-state): the lookup goes without its secret."""
    copy = pickle.loads(pickle.dumps(RedisLookup(server.url)))
    assert server.password not in pickle.dumps(RedisLookup(server.url)).decode("latin-1")
    assert copy.url == redact(server.url) and copy._client is None
