"""format("misa-state"): the state of a query run on misa, read as a DataFrame, is the state plain Spark's
``statestore`` reader shows for the same query and batch; the change feed is the difference of two full reads; reads
run while the job writes, never change the state, and fail with one clear line on a location, version or file they
cannot read."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
from counting_processor import CountingProcessor
from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkpoint.manifest import ShardManifest
from misa import MisaConfig, from_query, register_state_sources, transform_with_state_in_pandas

SCHEMA = "k string, t bigint, v bigint"


@pytest.fixture(autouse=True, scope="module")
def _registered(spark) -> None:
    """The readers, registered by the one call a session needs (a job's start registers them too)."""
    register_state_sources(spark)


FILES, ROWS = 3, 60


def write_input(folder: Path, seed: int = 7) -> None:
    """FILES files of ROWS rows over 6 keys; event time advances file by file, a few rows late."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(FILES):
        rows = []
        for i in range(ROWS):
            t = f * 12_000 + i * 200 - (rng.choice([0, 0, 0, 9_000]))
            rows.append({"k": f"u{rng.randrange(6)}", "t": max(t, 0), "v": rng.randrange(100)})
        path = folder / f"part-{f}.json"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # Spark reads files in modification-time order


def watermarked(rows: DataFrame) -> DataFrame:
    return rows.withColumn("event_time", F.timestamp_millis("t")).withWatermark("event_time", "5 seconds")


QUERIES: dict[str, tuple[Callable[[DataFrame], DataFrame], str]] = {
    "tumbling windows, sum and count": (
        lambda r: watermarked(r).groupBy(F.window("event_time", "10 seconds"), "k").agg(F.sum("v"), F.count("v")),
        "update",
    ),
    "sliding windows, max": (
        lambda r: watermarked(r).groupBy(F.window("event_time", "10 seconds", "5 seconds"), "k").agg(F.max("v")),
        "update",
    ),
    "no window, sum": (lambda r: r.groupBy("k").agg(F.sum("v")), "update"),
    "dropDuplicates": (lambda r: r.dropDuplicates(["k"]), "append"),
    "dropDuplicates with the event time": (lambda r: watermarked(r).dropDuplicates(["k", "event_time"]), "append"),
    "dropDuplicatesWithinWatermark": (lambda r: watermarked(r).dropDuplicatesWithinWatermark(["k"]), "append"),
}


def stream(spark, folder: Path) -> DataFrame:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))


def run_spark(spark, query: DataFrame, mode: str, checkpoint: Path) -> None:
    writer = query.writeStream.outputMode(mode).format("noop").option("checkpointLocation", str(checkpoint))
    writer.trigger(availableNow=True).start().awaitTermination()


def run_misa(query: DataFrame, mode: str, checkpoint: Path, **conf: str) -> None:
    settings = {"spark.misa.state.shards": "3", "spark.misa.state.retainVersions": "10"} | conf
    job = from_query(
        query, lambda b, t: None, str(checkpoint), output_mode=mode, config=MisaConfig.from_mapping(settings), echo=None
    )
    try:
        job.start(trigger={"availableNow": True}).awaitTermination()
    finally:
        job.close()


def comparable(value: Any) -> Any:
    """A row's key or value as a hashable, timestamps as microseconds (Spark's expiresAtMicros)."""
    if hasattr(value, "asDict"):
        return tuple((k, comparable(v)) for k, v in value.asDict().items())
    if hasattr(value, "timestamp"):
        return round(value.timestamp() * 1_000_000)
    return value


def values(value: Any) -> tuple:
    """A value's fields; Spark's deduplication keeps a placeholder field (``__dummy__``) where misa keeps none."""
    return tuple(v for name, v in comparable(value) if not name.startswith("__"))


def state_of(df: DataFrame) -> dict[Any, tuple]:
    """key -> the value's fields (names differ: misa shows the aggregates' output names, Spark its buffers')."""
    rows = df.collect()
    state = {comparable(r.key): values(r.value) for r in rows}
    assert len(state) == len(rows), "a key appears twice"
    return state


def spark_batch(spark, checkpoint: Path) -> int:
    return spark.read.format("state-metadata").load(str(checkpoint)).collect()[0].maxBatchId


# their families have cases in make test: -m slow runs these
ON_DEMAND = (
    "no window, sum",
    "dropDuplicates",
    "sliding windows, max",
    "dropDuplicates with the event time",
    "tumbling windows, sum and count",
)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in ON_DEMAND else n for n in QUERIES])
def test_the_state_is_what_sparks_statestore_reader_shows(spark, tmp_path, name):
    """At every batch: the keys and values of misa's state are those of Spark's."""
    build, mode = QUERIES[name]
    write_input(tmp_path / "in")
    run_spark(spark, build(stream(spark, tmp_path / "in")), mode, tmp_path / "spark")
    run_misa(build(stream(spark, tmp_path / "in")), mode, tmp_path / "misa")
    last = spark_batch(spark, tmp_path / "spark")
    held = 0
    for batch in range(last + 1):
        theirs = state_of(spark.read.format("statestore").option("batchId", batch).load(str(tmp_path / "spark")))
        ours_df = spark.read.format("misa-state").option("version", batch).load(str(tmp_path / "misa"))
        assert state_of(ours_df) == theirs, f"batch {batch}"
        assert {r.shard_id for r in ours_df.select("shard_id").collect()} <= {0, 1, 2}
        held += len(theirs)
    assert held, "the query keeps no state: the comparison would be empty"
    assert state_of(read(spark, tmp_path / "misa")) == theirs, "the newest durable version is the last batch's"


def run_both(spark, tmp_path, build, mode) -> int:
    """Run the query in plain Spark and on misa over the same input; the batch both states are read at."""
    write_input(tmp_path / "in")
    run_spark(spark, build(stream(spark, tmp_path / "in")), mode, tmp_path / "spark")
    run_misa(build(stream(spark, tmp_path / "in")), mode, tmp_path / "misa")
    return spark_batch(spark, tmp_path / "spark")


def test_session_windows_state_is_sparks(spark, tmp_path):
    """Spark keys a session by (group, start) and keeps the window and the group in the value; misa keys it by
    (group, window): the same sessions with the same aggregates."""

    def build(rows: DataFrame) -> DataFrame:
        return watermarked(rows).groupBy(F.session_window("event_time", "3 seconds"), "k").agg(F.count("v"), F.sum("v"))

    batch = run_both(spark, tmp_path, build, "append")
    theirs = {
        (r.value.k, comparable(r.value.session_window)): values(r.value)[2:]
        for r in spark.read.format("statestore").option("batchId", batch).load(str(tmp_path / "spark")).collect()
    }
    ours = {
        (r.key.k, comparable(r.key.session_window)): values(r.value)
        for r in read(spark, tmp_path / "misa", version=batch).collect()
    }
    assert theirs and ours == theirs


@pytest.mark.slow  # make test's time: the other state readers (deduplication, sessions) run in make test
@pytest.mark.parametrize("side", ["left", "right"])
def test_a_stream_joins_rows_are_sparks(spark, tmp_path, side):
    """Each side's stored rows per join key (misa adds each row's state-watermark time, ``time_us``)."""

    def build(rows: DataFrame) -> DataFrame:
        a, b = watermarked(rows).alias("a"), watermarked(rows).alias("b")
        condition = "a.k = b.k AND b.event_time BETWEEN a.event_time AND a.event_time + interval 2 seconds"
        return a.join(b, F.expr(condition))

    batch = run_both(spark, tmp_path, build, "append")
    spark_rows = spark.read.format("statestore").option("batchId", batch).option("joinSide", side)
    theirs = sorted((values(r.key), values(r.value)) for r in spark_rows.load(str(tmp_path / "spark")).collect())
    ours = sorted(
        (values(r.key), values(r.value)[:-1])
        for r in read(spark, tmp_path / "misa", version=batch, storeName=side).collect()
    )
    assert theirs and ours == theirs


@pytest.mark.slow  # the suite's time
def test_a_state_of_two_worker_processes_reads_as_one(spark, tmp_path):
    build, mode = QUERIES["tumbling windows, sum and count"]
    write_input(tmp_path / "in")
    run_spark(spark, build(stream(spark, tmp_path / "in")), mode, tmp_path / "spark")
    run_misa(build(stream(spark, tmp_path / "in")), mode, tmp_path / "misa", **{"spark.misa.state.processes": "2"})
    batch = spark_batch(spark, tmp_path / "spark")
    df = spark.read.format("misa-state").option("version", batch).load(str(tmp_path / "misa"))
    assert {r.partition_id for r in df.select("partition_id").distinct().collect()} == {0, 1}
    theirs = state_of(spark.read.format("statestore").option("batchId", batch).load(str(tmp_path / "spark")))
    assert state_of(df) == theirs
    meta = spark.read.format("misa-state-metadata").load(str(tmp_path / "misa"))
    assert {(r.num_partitions, r.partition_id) for r in meta.collect()} == {(2, 0), (2, 1)}


@pytest.fixture(scope="module")
def windows_state(spark, tmp_path_factory) -> Path:
    """A misa checkpoint of tumbling windows in update mode over FILES batches (windows open and close)."""
    folder = tmp_path_factory.mktemp("windows")
    write_input(folder / "in")
    build, mode = QUERIES["tumbling windows, sum and count"]
    run_misa(build(stream(spark, folder / "in")), mode, folder / "misa")
    return folder / "misa"


def read(spark, checkpoint: Path, **options: Any) -> DataFrame:
    reader = spark.read.format("misa-state")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(checkpoint))


def test_the_change_feed_is_the_difference_of_two_full_reads(spark, windows_state):
    versions = sorted({r.version for r in spark.read.format("misa-state-metadata").load(str(windows_state)).collect()})
    first, last = versions[0], versions[-1]
    assert last - first >= 2
    state = state_of(read(spark, windows_state, version=first))
    feed = read(spark, windows_state, changesFrom=first, changesTo=last).orderBy("version").collect()
    kinds = sorted((r.version, r.change_type) for r in feed)
    assert {r.change_type for r in feed} == {"update", "delete"}, f"windows should both change and close: {kinds}"
    for version in range(first + 1, last + 1):
        step = [r for r in feed if r.version == version]
        before = dict(state)
        for row in step:
            key = comparable(row.key)
            if row.change_type == "delete":
                assert row.value is None
                del state[key]
            else:
                state[key] = values(row.value)
        assert state == state_of(read(spark, windows_state, version=version)), f"version {version}"
        changed = {k for k in state if before.get(k) != state[k]} | {k for k in before if k not in state}
        assert sorted(map(repr, (comparable(r.key) for r in step))) == sorted(map(repr, changed)), "only what changed"


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def test_a_read_changes_nothing_and_bad_reads_fail_with_one_clear_line(spark, windows_state, tmp_path):
    before = files_of(windows_state)
    read(spark, windows_state).collect()
    spark.read.format("misa-state-metadata").load(str(windows_state)).collect()
    assert files_of(windows_state) == before

    def fails(match: str, checkpoint: Path | str, **options: Any) -> None:
        with pytest.raises(Exception, match=match):
            read(spark, Path(checkpoint), **options).collect()

    fails("does not exist", tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    fails("is not a misa checkpoint", tmp_path / "empty")
    fails("version 99 .* is not durable", windows_state, version=99)
    fails("not a version number", windows_state, version="latest")
    fails("storeName 'timers'", windows_state, storeName="timers")
    fails("changesFrom < changesTo", windows_state, changesFrom=2, changesTo=1)


def test_a_removed_version_and_a_damaged_file_are_named(spark, tmp_path):
    build, mode = QUERIES["tumbling windows, sum and count"]
    write_input(tmp_path / "in")
    run_misa(build(stream(spark, tmp_path / "in")), mode, tmp_path / "misa", **{"spark.misa.state.retainVersions": "2"})
    with pytest.raises(Exception, match="version 0 .* was removed"):
        read(spark, tmp_path / "misa", version=0).collect()
    state = tmp_path / "misa" / "misa-state"
    newest = max(int(p.name) for p in (state / "_commits").iterdir())
    manifests = [ShardManifest.from_json(p.read_bytes()) for p in state.glob(f"shard-*/manifest/{newest}.json")]
    files = [f.remote_path(m.shard) for m in manifests for f in m.files if f.name.endswith(".sst")]
    sst = state / files[0]  # a file the newest version reads
    data = bytearray(sst.read_bytes())
    data[len(data) // 2] ^= 0xFF
    sst.write_bytes(bytes(data))
    with pytest.raises(Exception, match="is damaged"):
        read(spark, tmp_path / "misa").collect()


@pytest.mark.slow  # the suite's time
def test_a_read_runs_while_the_job_writes(spark, tmp_path):
    """Reads of the newest durable version while batches commit; each equals the same version read afterwards."""
    (tmp_path / "in").mkdir()
    build, mode = QUERIES["no window, sum"]
    query = build(spark.readStream.schema(SCHEMA).json(str(tmp_path / "in")))
    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2", "spark.misa.state.retainVersions": "50"})
    job = from_query(query, lambda b, t: None, str(tmp_path / "misa"), output_mode=mode, config=config, echo=None)
    running = job.start(trigger={"processingTime": "500 milliseconds"})
    seen: dict[int, dict] = {}
    try:
        for i in range(40):  # a file, then a read of the newest durable version, until three versions were read
            (tmp_path / "in" / f"{i}.json").write_text(json.dumps({"k": f"u{i % 3}", "t": i, "v": i}))
            meta = spark.read.format("misa-state-metadata").load(str(tmp_path / "misa")).where("durable").collect()
            if meta:
                version = max(r.version for r in meta)
                seen.setdefault(version, state_of(read(spark, tmp_path / "misa", version=version)))
            if len(seen) >= 3:
                break
            time.sleep(0.3)
    finally:
        running.stop()
        job.close()
    assert len(seen) >= 3, "reads should have seen several versions while the job ran"
    for version, state in seen.items():
        assert state == state_of(read(spark, tmp_path / "misa", version=version))


cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Spark's Python workers cannot import this test module
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.mark.slow  # the suite's time
def test_a_stateful_processors_variables_are_sparks(spark, tmp_path):
    """Per state variable (Spark's stateVarName, misa's storeName): the same values, list elements and map entries
    (misa adds each value's TTL expiry, none here)."""
    write_input(tmp_path / "in")
    rows = stream(spark, tmp_path / "in").select("k", (F.col("v") % 5).alias("v"))
    provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)  # Spark's processors need it
    try:
        query = rows.groupBy("k").transformWithStateInPandas(CountingProcessor(), "k string, n long", "Update", "None")
        run_spark(spark, query, "update", tmp_path / "spark")
    finally:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    job = transform_with_state_in_pandas(
        stream(spark, tmp_path / "in").select("k", (F.col("v") % 5).alias("v")),
        ["k"],
        CountingProcessor(),
        "k string, n long",
        "update",
        "None",
        lambda b, t: None,
        str(tmp_path / "misa"),
        config=MisaConfig.from_mapping({"spark.misa.state.shards": "3"}),
        echo=None,
    )
    try:
        job.start(trigger={"availableNow": True}).awaitTermination()
    finally:
        job.close()
    batch = spark_batch(spark, tmp_path / "spark")

    def spark_rows(variable: str) -> list:
        reader = spark.read.format("statestore").option("batchId", batch).option("stateVarName", variable)
        return reader.load(str(tmp_path / "spark")).collect()

    def misa_rows(variable: str) -> list:
        return read(spark, tmp_path / "misa", version=batch, storeName=variable).collect()

    assert sorted((values(r[0]), values(r[1])) for r in spark_rows("count")) == sorted(
        (values(r.key), values(r.value)[:-1]) for r in misa_rows("count")
    )
    assert sorted((values(r[0]), values(r[1])) for r in spark_rows("seen")) == sorted(
        (values(r.key), values(r.value)[:-1]) for r in misa_rows("seen")
    )
    theirs = sorted((values(r[0]), values(r[1]), values(r[2])) for r in spark_rows("per_value"))
    ours = sorted((values(r.key)[:-1], values(r.key.user_key), values(r.value)[:-1]) for r in misa_rows("per_value"))
    assert theirs and ours == theirs
    assert all(r.value.ttl_expires_at_ms is None for r in misa_rows("count"))
    assert misa_rows("$timers") == []


def test_the_metadata_lists_each_shards_versions_where_they_are(spark, windows_state):
    """Every retained version of every shard, on the DFS and in the local working state, with sizes; the operator and
    its stores' schemas."""
    rows = spark.read.format("misa-state-metadata").load(str(windows_state)).collect()
    committed = sorted(int(p.name) for p in (windows_state / "misa-state" / "_commits").iterdir())
    local = sorted(int(p.name) for p in (windows_state / "misa-local" / "_commits").iterdir())
    assert sorted({r.version for r in rows}) == sorted(set(committed) | set(local))
    assert {(r.partition_id, r.shard_id) for r in rows} == {(0, s) for s in range(3)}
    for r in rows:
        assert (r.operator, r.stores, r.num_partitions) == ("Aggregation", ["default"], 1)
        assert r.key_schema == "struct<window:struct<start:timestamp,end:timestamp>,k:string>"
        assert r.value_schema == "struct<sum(v):bigint,count(v):bigint>"
        assert r.durable == (r.version in committed) and r.local == (r.version in local)
        assert (r.dfs_bytes or 0) > 0 if r.durable else r.dfs_bytes is None
        assert (r.local_bytes or 0) > 0 if r.local else r.local_bytes is None
