"""A standby's partition worker (no Spark): its commits stay local until it claims the partition, which fences the
host it replaces and uploads the versions the DFS lacks; from then on it commits to the DFS as a host does."""

from __future__ import annotations

import pickle

import pytest

from checkpoint.exceptions import OwnershipError
from misa.config import MisaConfig
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
