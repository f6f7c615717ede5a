"""A standby's partition worker (no Spark): its commits stay local until it claims the partition, which fences the
host it replaces and uploads the versions the DFS lacks; from then on it commits to the DFS as a host does."""

from __future__ import annotations

import contextlib
import pickle
import threading
import time
from typing import Any

import pytest

from checkpoint.exceptions import OwnershipError
from misa.config import MisaConfig
from misa.exceptions import CommitFailedError
from misa.hosts.server import HostTables, Inbox
from misa.operators.aggregation import Agg, Aggregation
from misa.parallel.worker import PartitionWorker
from tests.misa.operators.test_operators import deltas, rows_of

QUERY = "q-standby"


def worker(tmp_path, name: str, standby: bool) -> tuple[PartitionWorker, HostTables]:
    tables = HostTables()
    operator = pickle.dumps(
        Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", watermark_delay="30s")
    )
    config = MisaConfig.from_mapping({"spark.misa.state.retainVersions": "3"})
    return PartitionWorker(
        config, str(tmp_path / name), f"file://{tmp_path / 'dfs'}", operator, tables, standby
    ), tables


def batch(pair: tuple[PartitionWorker, HostTables], token: str, rows: list[tuple]) -> list[dict]:
    """One batch's apply on ``pair``'s worker: its output rows."""
    part, tables = pair
    table = deltas(rows)
    tables.put([token.encode(), b"0", b"0"], table)
    result = part.apply(Inbox(token, ((0, 0),), table.schema.serialize().to_pybytes()))
    return rows_of(tables.fetch(result.output.handle))


def test_a_standby_commits_locally_then_takes_over_with_every_version_and_fences_its_host(tmp_path):
    host = worker(tmp_path, "host", standby=True)  # every host starts so; the start's claim makes it the host
    standby = worker(tmp_path, "standby", standby=True)
    signature = {"operator": "test"}
    host[0].claim(QUERY, pickle.dumps(host[0].operator), signature)
    standby[0].follow(QUERY, pickle.dumps(standby[0].operator), signature)
    batches = [[(10, 1, 2, 5.0, 9)], [(10, 1, 1, 1.5, 13), (20, 2, 1, 7.0, 12)], [(30, 3, 1, 2.0, 25)]]
    for version, rows in enumerate(batches):
        assert batch(host, f"h{version}", rows) == batch(standby, f"s{version}", rows)
        host[0].commit(version)
        standby[0].commit(version)
    host[0].controller.drain()
    standby[0].controller.drain()
    dfs = host[0].checkpoints.dfs
    assert dfs.committed_versions() == [0, 1, 2]
    assert standby[0].checkpoints.local.versions() == [0, 1, 2]  # its own checkpoints, none written to the DFS

    dfs.forget([2])  # the host's upload of version 2 never ended: the DFS lacks it when the host is lost
    standby[0].claim(QUERY, b"not read: the standby keeps its operator", signature)
    assert dfs.committed_versions() == [0, 1, 2]  # the standby's own version 2 uploaded
    with pytest.raises(OwnershipError, match="superseded"):  # the old host is fenced before its next marker
        host[0].checkpoints.check_owner()

    after = batch(standby, "s3", [(10, 1, 1, 1.0, 14)])  # it goes on from its state: the window sums 7.5
    assert [(r["g"], r["s"]) for r in after] == [(1, 7.5)]
    standby[0].commit(3)
    standby[0].controller.wait_durable(3)
    assert dfs.committed_versions()[-1] == 3  # a host's commits from then on
    for part, _ in (host, standby):
        part.close()


class StandInScheduler:
    """What Spark's scheduler answers the pool (its part, who runs and kills the tasks): ``waiting`` reported and not
    taken; a killed standby's task is run again (the same process reports again)."""

    def __init__(self, key: bytes, standby: Any) -> None:
        self.key, self.standby, self.waiting, self.killed = key, standby, [standby], []

    def fresh(self, partition: int) -> Any:
        return self.waiting.pop() if self.waiting else None

    def start_again(self) -> None:  # no task left without serving here (tests/misa/hosts/test_seats.py)
        return None

    def kill(self, address: Any, why: str) -> None:
        self.killed.append(address.task_attempt)
        if address == self.standby:
            self.waiting.append(self.standby)

    def executors(self, hosts: list) -> dict[int, str]:
        return {}

    def decommissioning(self, hosts: list) -> set[int]:
        return set()


def pool_of(tmp_path, key: bytes) -> tuple[Any, list, StandInScheduler, Any]:
    """A driver's pool over one partition with a host and a standby, each a real worker behind a Flight server (no
    Spark); the pool, the servers, the stand-in scheduler and the standby's address."""
    from misa.hosts.calls import Host
    from misa.hosts.client import HostPool
    from misa.hosts.host_task import HostAddress
    from misa.hosts.journal import HostJournal
    from misa.hosts.server import StateHostServer

    servers = []
    for name in ("host", "standby"):
        part, tables = worker(tmp_path, name, standby=True)
        servers.append(StateHostServer("grpc+tcp://127.0.0.1:0", part, tables, key))
    host, standby = (HostAddress(0, f"grpc+tcp://127.0.0.1:{s.port}", "localhost", 1, i) for i, s in enumerate(servers))
    pool = object.__new__(HostPool)
    pool.config = MisaConfig.from_mapping(
        {"spark.misa.state.placement": "executors", "spark.misa.state.standbyReplicas": "1"}
    )
    scheduler = StandInScheduler(key, standby)
    pool.group, pool.locations, pool.journal = scheduler, [("partition 0", "")], HostJournal()
    pool._hosts, pool._standbys, pool._joining, pool._sent_to = [Host.connect(host)], [[]], [[]], {}
    pool._outputs, pool._losses, pool._broken, pool._lock, pool._launch = [None], {}, None, threading.RLock(), 1
    pool._keeper = None
    return pool, servers, scheduler, standby


def joined(pool: Any) -> None:
    deadline = time.monotonic() + 30
    while not pool._standbys[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool._standbys[0], "the standby did not join"


def close_servers(servers: list) -> None:
    for server in servers:
        server.shutdown()
    with contextlib.suppress(CommitFailedError):  # the deposed host: an upload still pending is refused
        servers[0].worker.close()
    servers[1].worker.close()


def test_a_pools_standby_follows_every_change_and_takes_over_when_its_host_is_lost(tmp_path):
    """The pool of :func:`pool_of`: the standby joins from the newest durable version, gets the batch's rows and
    requests with its host; a replayed batch rewinds the host, which the standby does not follow, so it is dropped and
    follows anew; when the host is gone the next sending finds it lost and the standby takes over; the batch after it
    goes on from the same state."""
    import pyarrow.flight as flight

    from misa.hosts.server import call_options

    key = b"s" * 32
    pool, servers, scheduler, standby = pool_of(tmp_path, key)
    killed = scheduler.killed
    operator = pickle.dumps(
        Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", watermark_delay="30s")
    )
    keys_of = lambda t: [t["g"]]  # noqa: E731 - one partition: every row routes to it

    def batch(version: int, rows: list[tuple]) -> list[tuple]:
        inboxes, _ = pool.route(deltas(rows), keys_of)
        (result,) = pool.ask_each("apply", [(inboxes[0],)])
        pool.ask("commit", version)
        reader = flight.FlightClient(pool.addresses[0].location)
        table = reader.do_get(flight.Ticket(result.output.handle.encode()), call_options(key)).read_all()
        reader.close()
        return sorted((r["g"], r["s"]) for r in table.to_pylist())

    try:
        pool.ask("claim", QUERY, operator, {"operator": "test"})
        pool.ask("adopt", -1)
        assert batch(0, [(10, 1, 2, 5.0, 9)]) == [(1, 5.0)]  # the standby joins (in the background) meanwhile
        joined(pool)
        assert batch(1, [(10, 1, 1, 1.5, 13)]) == [(1, 6.5)]  # host and standby both apply it
        pool.ask("call", "controller", "drain")  # batch 1 replayed: the hosts rewind to version 0, as the runtime
        pool.ask("call", "checkpoints", "forget_after", 0)  # does: newer markers first
        pool.ask("load", 0)
        pool.ask("adopt", 0)
        assert pool._standbys == [[]] and killed == [1]  # the standby does not follow a rewind: dropped
        assert batch(1, [(10, 1, 1, 1.5, 13)]) == [(1, 6.5)]  # it follows anew meanwhile
        joined(pool)
        assert batch(2, [(10, 1, 1, 2.0, 13)]) == [(1, 8.5)]
        servers[0].shutdown()  # the host's executor is gone
        assert batch(3, [(10, 1, 1, 1.0, 14)]) == [(1, 9.5)]  # the standby's state: nothing reloaded
        assert pool.addresses[0] == standby and killed == [1, 0]
        pool.ask("call", "controller", "wait_durable", 3)
        assert servers[1].worker.checkpoints.dfs.committed_versions()[-1] == 3
    finally:
        close_servers(servers)


def test_an_idle_pools_standby_joins_between_the_batches(tmp_path):
    """Without a batch (an idle query), the pool's upkeep attaches the standby its partition lacks, as a sending does
    (a standby started again after a loss is then ready before the next one); it ends with its launch."""
    key = b"s" * 32
    pool, servers, _, _ = pool_of(tmp_path, key)
    operator = pickle.dumps(
        Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", watermark_delay="30s")
    )
    try:
        pool.ask("claim", QUERY, operator, {"operator": "test"})
        pool.ask("adopt", -1)
        assert pool._standbys == [[]] and pool._joining == [[]]  # no sending: nothing attached it
        assert pool._keep_standbys(pool._launch)
        joined(pool)
        assert not pool._keep_standbys(pool._launch - 1)  # the launch it kept ended
    finally:
        close_servers(servers)
