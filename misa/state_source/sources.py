"""misa's state as DataFrames, through PySpark's Python data source API (``pyspark.sql.datasource``).

* ``spark.read.format("misa-state").load(checkpoint)``: the state rows of a version (default: the newest durable;
  ``option("version", N)``) of one store of the operator (``option("storeName", ...)``, default its main one), with
  columns ``key`` and ``value`` (structs of the operator's key and value columns, typed as its Spark schema),
  ``partition_id`` and ``shard_id``. One input partition per key partition and shard, read on the executors from
  that version's DFS copy (:mod:`misa.state_source.shard_read`); the driver reads manifests only.
* ``option("changesFrom", A).option("changesTo", B)``: the change feed, the rows put (``update``) or deleted
  (``delete``, value null) by each version in A+1..B against the version before, with columns ``version`` and
  ``change_type`` first, as Spark's ``readChangeFeed`` gives them (``batch_id``, ``change_type``).
* ``spark.read.format("misa-state-metadata").load(checkpoint)``: one row per key partition, shard and version held on
  the DFS or locally: the operator, its stores and schemas, sizes, durability.

Registered by :func:`register_state_sources` (``misa.register_state_sources(spark)``; a job registers them when it
starts).
Errors are :class:`misa.exceptions.StateSourceError`, one line naming the problem and what to do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from checkpoint.local import LocalCheckpoints
from checkpoint.manifest import ShardManifest
from common.location import parse
from misa.exceptions import StateSourceError
from misa.operators.base import StateReadable, StateStoreSpec
from misa.state_source.locate import (
    StateLocation,
    dfs,
    durable_versions,
    locate,
    operator_metadata,
    pick_version,
    shard_manifests,
)
from misa.state_source.operator_record import load_operator, operator_bytes, read_record
from misa.state_source.row_diff import changed_rows
from misa.state_source.shard_read import entries, opened_shard

CHUNK_ENTRIES = 65_536  # state entries decoded at a time
PLACE = [pa.field("partition_id", pa.int32()), pa.field("shard_id", pa.int32())]
CHANGE = [pa.field("version", pa.int64()), pa.field("change_type", pa.string())]


@dataclass
class ShardPart(InputPartition):
    """One read task: a shard of a key partition's store at ``version`` (and, in a change feed, the version before)."""

    partition: int
    shard: int
    url: str
    manifest: str
    previous: str | None = None


def _int_option(options: Any, name: str) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise StateSourceError(f"option {name}={text!r} is not a version number (an integer)") from None


def _readable(operator: Any) -> StateReadable:
    if not isinstance(operator, StateReadable):
        raise StateSourceError(
            f"{type(operator).__name__}'s state cannot be shown as rows yet (it does not implement "
            "misa.operators.base.StateReadable); misa-state-metadata describes it"
        )
    return operator


def _store(operator: StateReadable, name: str | None) -> StateStoreSpec:
    """The store ``name`` (None: the operator's main one)."""
    stores = operator.state_stores()
    for store in stores:
        if store.name == name or name is None:
            return store
    raise StateSourceError(f"storeName {name!r}: the operator's stores are {', '.join(s.name for s in stores)}")


class MisaStateSource(DataSource):
    """``format("misa-state")``: see the module."""

    @classmethod
    def name(cls) -> str:
        return "misa-state"

    def _plan(self) -> tuple[bytes, StateReadable, StateStoreSpec, list[ShardPart], bool]:
        """The read's plan, made once (``schema`` and ``reader`` share it, so both see the same version)."""
        if getattr(self, "_planned", None) is None:
            self._planned = self._make_plan()
        return self._planned

    def _make_plan(self) -> tuple[bytes, StateReadable, StateStoreSpec, list[ShardPart], bool]:
        """The operator (pickled, and loaded at the read's version), the store, the read tasks, and whether it is a
        change feed."""
        if "path" not in self.options:
            raise StateSourceError('give the checkpoint location: spark.read.format("misa-state").load(location)')
        location = locate(self.options["path"])
        versions = durable_versions(location)
        start, end = _int_option(self.options, "changesFrom"), _int_option(self.options, "changesTo")
        feed = start is not None or end is not None
        if feed and (start is None or end is None or start >= end):
            raise StateSourceError(f"a change feed needs changesFrom < changesTo, got {start} and {end}")
        if feed and self.options.get("version") is not None:
            raise StateSourceError("give either version or changesFrom/changesTo, not both")
        read = [pick_version(location, versions, v) for v in range(start, end + 1)] if feed else None  # type: ignore[operator]
        version = read[-1] if read else pick_version(location, versions, _int_option(self.options, "version"))
        record = read_record(location.root)
        code = operator_bytes(location.root, record)
        parts: list[ShardPart] = []
        newest: list[ShardManifest] = []
        for index, url in enumerate(location.partitions):
            held = {v: shard_manifests(url, v) for v in read or [version]}  # each version's manifests read once
            newest += held[version]
            if not feed:
                parts += [ShardPart(index, m.shard, url, m.to_json().decode()) for m in held[version]]
                continue
            for v in read[1:]:  # type: ignore[index]
                before = {m.shard: m for m in held[v - 1]}
                parts += [
                    ShardPart(index, m.shard, url, m.to_json().decode(), before[m.shard].to_json().decode())
                    for m in held[v]
                ]
        operator = _described(code, newest)
        return code, operator, _store(operator, self.options.get("storeName")), parts, feed

    def schema(self) -> T.StructType:
        _, _, store, _, feed = self._plan()
        return from_arrow_schema(_row_schema(store, feed))

    def reader(self, schema: T.StructType) -> DataSourceReader:
        code, _, store, parts, feed = self._plan()
        return StateReader(code, store.name, parts, feed)


def _described(code: bytes, manifests: list[ShardManifest]) -> StateReadable:
    """The operator restored from the first of ``manifests`` whose metadata gives its state's types (a partition that
    saw no rows yet gives none)."""
    operator = _readable(load_operator(code))
    for manifest in manifests:
        operator.restore(operator_metadata(manifest))  # type: ignore[attr-defined]
        if any(s.key.num_fields or s.value.num_fields for s in operator.state_stores()):
            break
    return operator


def _row_schema(store: StateStoreSpec, feed: bool) -> pa.Schema:
    fields = [pa.field("key", store.key), pa.field("value", store.value), *PLACE]
    return pa.schema([*CHANGE, *fields] if feed else fields)


class StateReader(DataSourceReader):
    """Reads the shards of :class:`ShardPart` tasks on the executors (the operator's code travels with the reader)."""

    def __init__(self, code: bytes, store: str, parts: list[ShardPart], feed: bool):
        self.code, self.store, self.parts, self.feed = code, store, parts, feed

    def partitions(self) -> list[ShardPart]:
        return self.parts

    def read(self, partition: ShardPart) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        manifest = ShardManifest.from_json(partition.manifest.encode())
        if not self.feed:
            for rows in self._rows(partition, manifest):
                yield from _placed(rows, partition).to_batches()
            return
        assert partition.previous is not None
        before = ShardManifest.from_json(partition.previous.encode())
        old = pa.concat_tables(list(self._rows(partition, before)))
        new = pa.concat_tables(list(self._rows(partition, manifest)))
        changes = changed_rows(old, new)
        version = pa.array([manifest.version] * changes.num_rows, pa.int64())
        yield from _placed(changes, partition, version).to_batches()

    def _rows(self, partition: ShardPart, manifest: ShardManifest) -> Iterator[pa.Table]:
        """The store's rows in the shard at ``manifest``'s version (at least one table, maybe empty)."""
        operator = _readable(load_operator(self.code))
        operator.restore(operator_metadata(manifest))  # type: ignore[attr-defined]
        store = _store(operator, self.store)
        yield pa.table({"key": pa.array([], store.key), "value": pa.array([], store.value)})
        with opened_shard(partition.url, manifest) as db:
            for keys, values in entries(db, store.begin, store.end, CHUNK_ENTRIES):
                yield operator.state_rows(self.store, keys, values)


def _placed(rows: pa.Table, part: ShardPart, version: pa.Array | None = None) -> pa.Table:
    """``rows`` with their partition and shard (and, in a change feed, their version first)."""
    n = rows.num_rows
    placed = rows.append_column(PLACE[0], pa.array([part.partition] * n, pa.int32()))
    placed = placed.append_column(PLACE[1], pa.array([part.shard] * n, pa.int32()))
    if version is not None:
        placed = placed.select(["change_type", "key", "value", *[f.name for f in PLACE]])
        placed = placed.add_column(0, CHANGE[0], version)
    return placed


# ---------------------------------------------------------------------------------------------------- the metadata
METADATA_SCHEMA = pa.schema(
    [
        pa.field("operator", pa.string()),
        pa.field("stores", pa.list_(pa.string())),
        pa.field("key_schema", pa.string()),
        pa.field("value_schema", pa.string()),
        pa.field("num_partitions", pa.int32()),
        *PLACE,
        pa.field("version", pa.int64()),
        pa.field("durable", pa.bool_()),
        pa.field("local", pa.bool_()),
        pa.field("dfs_bytes", pa.int64()),
        pa.field("local_bytes", pa.int64()),
        pa.field("signature", pa.string()),
    ]
)


class MisaStateMetadataSource(DataSource):
    """``format("misa-state-metadata")``: one row per key partition, shard and version; ``option("stateDir", dir)``
    names the working state's folder (default ``<checkpoint>/misa-local`` when the location is on this machine)."""

    @classmethod
    def name(cls) -> str:
        return "misa-state-metadata"

    def schema(self) -> T.StructType:
        return from_arrow_schema(METADATA_SCHEMA)

    def reader(self, schema: T.StructType) -> DataSourceReader:
        if "path" not in self.options:
            raise StateSourceError(
                'give the checkpoint location: spark.read.format("misa-state-metadata").load(location)'
            )
        location = locate(self.options["path"])
        return MetadataReader(_metadata_rows(location, self._state_dir(location)))

    def _state_dir(self, location: StateLocation) -> Path | None:
        given = self.options.get("stateDir")
        if given:
            return Path(given)
        checkpoint = parse(self.options["path"])
        if checkpoint.local is None or location.root == checkpoint.url:  # given the DFS copy: no default
            return None
        return checkpoint.local / "misa-local"


def _metadata_rows(location: StateLocation, state_dir: Path | None) -> list[dict[str, Any]]:
    record = read_record(location.root)
    operator = load_operator(operator_bytes(location.root, record))
    rows: list[dict[str, Any]] = []
    count = len(location.partitions)
    for index, url in enumerate(location.partitions):
        copy = dfs(url)
        durable = set(copy.committed_versions())
        local_root = None if state_dir is None else state_dir / f"partition-{index}" if count > 1 else state_dir
        local = LocalCheckpoints(local_root) if local_root is not None and local_root.is_dir() else None
        local_versions = set(local.versions()) if local is not None else set()
        for version in sorted(durable | local_versions):
            on_dfs = copy.manifests(version) if version in durable else None
            held = local.manifests(version) if local is not None and version in local_versions else None
            for shard, manifest in enumerate(on_dfs or held or []):
                stores = _stores(operator, manifest)
                rows.append(
                    {
                        "operator": record.signature.get("operator", type(operator).__name__),
                        "stores": [s.name for s in stores],
                        "key_schema": _shown(stores[0].key) if stores else None,
                        "value_schema": _shown(stores[0].value) if stores else None,
                        "num_partitions": count,
                        "partition_id": index,
                        "shard_id": shard,
                        "version": version,
                        "durable": on_dfs is not None,
                        "local": held is not None,
                        "dfs_bytes": on_dfs[shard].total_bytes if on_dfs else None,
                        "local_bytes": held[shard].total_bytes if held else None,
                        "signature": json.dumps(record.signature, sort_keys=True),
                    }
                )
    return rows


def _stores(operator: Any, manifest: ShardManifest) -> list[StateStoreSpec]:
    if not isinstance(operator, StateReadable):
        return []
    operator.restore(operator_metadata(manifest))  # type: ignore[attr-defined]
    return operator.state_stores()


def _shown(struct: pa.StructType) -> str:
    return from_arrow_schema(pa.schema(list(struct))).simpleString()


class MetadataReader(DataSourceReader):
    """Gives the rows the driver built (manifests are small: nothing to spread)."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        yield from pa.Table.from_pylist(self.rows, METADATA_SCHEMA).to_batches()


def register_state_sources(spark: SparkSession | None = None) -> None:
    """Register ``misa-state`` and ``misa-state-metadata`` with ``spark`` (default: the active session)."""
    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise StateSourceError("no active Spark session to register misa's state sources with: pass one")
    session.dataSource.register(MisaStateSource)
    session.dataSource.register(MisaStateMetadataSource)
