"""The state as rows (:class:`misa.operators.base.StateReadable`) of the interval join, the keyed operators and the
lookup aggregation, read as ``format("misa-state")`` reads it, without Spark: the operator pickled before its first
batch, restored with a durable version's metadata, decoding each shard's entries of the version's DFS copy; the rows
are compared with the ones the input fed gives."""

from __future__ import annotations

import json
import pickle
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import pyarrow as pa
import pytest

from misa.operators.aggregation import Agg, Aggregation
from misa.operators.base import MAX_EVENT, ROWS
from misa.operators.dedup import Deduplicate
from misa.operators.interval_join import EVENT_US, IntervalJoin
from misa.operators.keyed import KeyedJoin, LookupJoin, TopN
from misa.operators.lookup_aggregation import LookupAggregation
from misa.operators.sessions import END as SESSION_END
from misa.operators.sessions import START as SESSION_START
from misa.operators.sessions import SessionAggregation
from misa.state_source.locate import dfs, operator_metadata
from misa.state_source.shard_read import entries, opened_shard

S = 1_000_000  # one second in microseconds
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
TS = pa.timestamp("us", tz="UTC")  # Spark's timestamp


def at(seconds: float) -> datetime:
    """A timestamp as the state's rows show it (UTC)."""
    return EPOCH + timedelta(seconds=seconds)


class Store(NamedTuple):
    """A store as a read shows it: its key and value columns, and its rows as sorted (key, value) pairs of items."""

    key: pa.StructType
    value: pa.StructType
    rows: list[tuple]


def read_state(code: bytes, url: str, version: int) -> dict[str, Store]:
    """Every store of ``version`` of the store at ``url`` as the reader gets it, entries two at a time (so that an
    entry's rows and a store's rows come from several calls)."""
    stores: dict[str, Store] = {}
    for manifest in dfs(url).manifests(version):
        operator = pickle.loads(code)
        operator.restore(operator_metadata(manifest))
        with opened_shard(url, manifest) as db:
            for spec in operator.state_stores():
                store = stores.setdefault(spec.name, Store(spec.key, spec.value, []))
                assert (store.key, store.value) == (spec.key, spec.value)  # every shard shows the same columns
                shown = pa.schema([pa.field("key", spec.key), pa.field("value", spec.value)])
                for keys, values in entries(db, spec.begin, spec.end, 2):
                    table = operator.state_rows(spec.name, keys, values)
                    assert table.schema == shown
                    store.rows.extend((tuple(r["key"].items()), tuple(r["value"].items())) for r in table.to_pylist())
    for store in stores.values():
        store.rows.sort(key=repr)
    return stores


def expected(*rows: tuple[dict[str, Any], dict[str, Any]]) -> list[tuple]:
    return sorted(((tuple(k.items()), tuple(v.items())) for k, v in rows), key=repr)


def started(run, operator) -> tuple[bytes, Any]:
    """The operator pickled as the job records it at start (before any batch), and a runner driving it."""
    return pickle.dumps(operator), run(operator)


def dfs_url(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'dfs'}"  # the runner's (tests/misa/operators/conftest.py)


# ---------------------------------------------------------------------------------------------- interval join
def interval_join(delay: str = "1h") -> IntervalJoin:
    return IntervalJoin(["vid", "lane"], "event_time", ["spd", "dist"], interval="30s", watermark_delay=delay)


def reports(*rows: tuple) -> pa.Table:
    """rows: (vid, lane, time_s, spd, dist); deltas as IntervalJoin.deltas makes them."""
    return pa.table(
        {
            "vid": pa.array([r[0] for r in rows], pa.string()),
            "lane": pa.array([r[1] for r in rows], pa.int64()),
            EVENT_US: pa.array([r[2] * S for r in rows], pa.int64()),
            "spd": pa.array([r[3] for r in rows], pa.int32()),
            "dist": pa.array([r[4] for r in rows], pa.int64()),
        }
    )


def test_interval_join_shows_each_stored_row_in_its_bucket(run, tmp_path):
    code, runner = started(run, interval_join())
    first = [("a", 1, 5, 10, 100), ("a", 1, 25, None, 101), ("b", -2, 31, 12, None)]
    second = [("a", 1, 29, 13, 102), ("é", 7, 95, 14, 103)]
    runner.batch(reports(*first, (None, 3, 40, 1, 1)))  # a null key joins nothing and is not stored
    runner.batch(reports(*second))
    rows = []
    for vid, lane, t, spd, dist in first + second:
        end = (t // 30 + 1) * 30
        key = {"vid": vid, "lane": lane, "bucket": {"start": at(end - 30), "end": at(end)}}
        rows.append((key, {"event_time": at(t), "spd": spd, "dist": dist}))
    key_type = pa.struct(
        [("vid", pa.string()), ("lane", pa.int64()), ("bucket", pa.struct([("start", TS), ("end", TS)]))]
    )
    value_type = pa.struct([("event_time", TS), ("spd", pa.int32()), ("dist", pa.int64())])
    assert read_state(code, dfs_url(tmp_path), runner.version) == {
        "default": Store(key_type, value_type, expected(*rows))
    }


def test_interval_join_restored_evicts_and_types_its_batch_without_data(run):
    code, runner = started(run, interval_join(delay="0s"))
    runner.batch(reports(("a", 1, 10, 1, 1), ("a", 2, 20, 2, 2)))
    runner.batch(reports(("a", 1, 200, 3, 3)))  # the next watermark: 200 s
    restarted = pickle.loads(code)
    restarted.restore(json.loads(json.dumps(runner.operator.metadata())))
    output = restarted.no_data_batch(runner.view).output
    assert [int.from_bytes(k[:8], "big") // S for k in runner.keys()] == [210]  # the buckets ending by 171 s are gone
    types = [("vid", pa.string()), ("lane", pa.int64()), ("spd", pa.int32()), ("prev_spd", pa.int32())]
    assert output.num_rows == 0 and output.schema == pa.schema(
        [*types, ("dist", pa.int64()), ("prev_dist", pa.int64())]
    )


# ---------------------------------------------------------------------------------------------- keyed operators
SIDE_TABLE = (pa.struct([("key", pa.int64())]), pa.struct([("value", pa.string())]))  # LookupJoin's side table


def test_lookup_join_shows_its_side_table(run, tmp_path):
    side = tmp_path / "side.jsonl"
    table = {0: "zero", -4: None, 7: "seven", 12: "é"}
    side.write_text("".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in table.items()))
    code, runner = started(run, LookupJoin("auction", ["auction", "bidder"], side))
    runner.batch(pa.table({"auction": pa.array([3, 4], pa.int64()), "bidder": pa.array([1, 2], pa.int64())}))
    rows = expected(*[({"key": k}, {"value": v}) for k, v in table.items()])
    assert read_state(code, dfs_url(tmp_path), runner.version) == {"default": Store(*SIDE_TABLE, rows)}


def offers(*rows: tuple) -> pa.Table:
    """rows: (name, id, price, note)."""
    names = ("name", "id", "price", "note")
    types = (pa.string(), pa.int64(), pa.int64(), pa.string())
    return pa.table({n: pa.array([r[i] for r in rows], t) for i, (n, t) in enumerate(zip(names, types))})


def test_top_n_shows_each_keys_first_rows_with_their_ranks(run, tmp_path):
    top = TopN(["name", "id"], ["price", "note"], [("price", "descending"), ("note", "ascending")], 2, "rank")
    code, runner = started(run, top)
    runner.batch(offers(("x", 1, 5, "a"), ("x", 1, 9, None), ("y", -3, 1, "b"), (None, 1, 4, "n")))
    runner.batch(offers(("x", 1, 7, "c"), ("x", 1, 9, "z"), ("x", 2, None, "d")))
    rows = [
        ({"name": "x", "id": 1}, {"rank": 1, "price": 9, "note": "z"}),
        ({"name": "x", "id": 1}, {"rank": 2, "price": 9, "note": None}),  # nulls last; 7 and 5 are out
        ({"name": "x", "id": 2}, {"rank": 1, "price": None, "note": "d"}),
        ({"name": "y", "id": -3}, {"rank": 1, "price": 1, "note": "b"}),
        ({"name": None, "id": 1}, {"rank": 1, "price": 4, "note": "n"}),
    ]
    key_type = pa.struct([("name", pa.string()), ("id", pa.int64())])
    value_type = pa.struct([("rank", pa.int32()), ("price", pa.int64()), ("note", pa.string())])
    assert read_state(code, dfs_url(tmp_path), runner.version) == {
        "default": Store(key_type, value_type, expected(*rows))
    }


BID = pa.struct([("auction", pa.int64()), ("bidder", pa.int64()), ("note", pa.string())])
AUCTION = pa.struct([("id", pa.int64()), ("category", pa.int64()), ("name", pa.string())])


def events(*rows: tuple) -> pa.Table:
    """rows: ("a", id, category, name) or ("b", auction, bidder, note): each event in its struct column."""
    bids = [dict(zip(BID.names, r[1:])) if r[0] == "b" else None for r in rows]
    auctions = [dict(zip(AUCTION.names, r[1:])) if r[0] == "a" else None for r in rows]
    return pa.table({"bid": pa.array(bids, BID), "auction": pa.array(auctions, AUCTION)})


def bid(auction: int, bidder: int, note: str | None) -> tuple[dict, dict]:
    return {"auction": auction}, {"auction": auction, "bidder": bidder, "note": note}


def auction(id_: int, category: int, name: str | None) -> tuple[dict, dict]:
    return {"id": id_}, {"id": id_, "category": category, "name": name}


@pytest.mark.parametrize(
    ("unique_right", "stores"),
    [
        (
            True,  # the right rows (one failing the filter keeps its key and filter column), the bids still waiting
            {
                "right": [auction(1, 10, "one"), auction(2, 11, None)],
                "waiting_left": [bid(3, 31, "p"), bid(4, 41, None), bid(4, 42, "q")],
            },
        ),
        (
            False,  # the right rows that pass the filter, every bid
            {
                "right": [auction(1, 10, "one")],
                "left": [bid(1, 11, "o"), bid(3, 31, "p"), bid(4, 41, None), bid(4, 42, "q")],
            },
        ),
    ],
)
def test_keyed_join_shows_its_right_rows_and_its_left_rows(run, tmp_path, unique_right: bool, stores: dict):
    join = KeyedJoin("bid", "auction", "auction", "id", ("category", 10), unique_right=unique_right)
    code, runner = started(run, join)
    runner.batch(events(("a", 1, 10, "one"), ("a", 2, 11, "two"), ("b", 3, 31, "p"), ("b", None, 9, "x")))
    runner.batch(events(("b", 1, 11, "o"), ("b", 4, 41, None), ("b", 4, 42, "q")))
    read = read_state(code, dfs_url(tmp_path), runner.version)
    types = {"right": (pa.struct([("id", pa.int64())]), AUCTION), "left": (pa.struct([("auction", pa.int64())]), BID)}
    assert list(read) == list(stores)  # the right rows first
    assert read == {
        name: Store(*types[name.removeprefix("waiting_")], expected(*rows)) for name, rows in stores.items()
    }


# ---------------------------------------------------------------------------------------------- lookup aggregation
CAMPAIGNS = {"ad-1": "c1", "ad-2": "c1", "ad-é": "c2"}
LOOKED_UP = (pa.struct([("ad", pa.string())]), pa.struct([("campaign", pa.string())]))  # the lookup store's columns


def campaigns(ads: Sequence[str]) -> list[str | None]:
    return [CAMPAIGNS.get(ad) for ad in ads]


def views(delay: str = "1h", mode: str = "update") -> LookupAggregation:
    aggs = [Agg("views", "count", "event_time"), Agg("top", "max", "x")]
    aggregation = Aggregation(["campaign"], aggs, "event_time", "10 seconds", watermark_delay=delay, output_mode=mode)
    return LookupAggregation("ad", aggregation, campaigns)


def ad_deltas(*rows: tuple) -> pa.Table:
    """Per (window, ad) deltas as Spark sends them; rows: (window_end_s, ad, views, top, max_event_s)."""
    return pa.table(
        {
            "_window_start_us": pa.array([(r[0] - 10) * S for r in rows], pa.int64()),
            "_window_end_us": pa.array([r[0] * S for r in rows], pa.int64()),
            "ad": pa.array([r[1] for r in rows], pa.string()),
            "_rows": pa.array([r[2] for r in rows], pa.int64()),
            "_max_event_us": pa.array([r[4] * S for r in rows], pa.int64()),
            "_v0": pa.array([r[2] for r in rows], pa.int64()),
            "_c0": pa.array([r[2] for r in rows], pa.int64()),
            "_v1": pa.array([r[3] for r in rows], pa.int64()),
            "_c1": pa.array([0 if r[3] is None else r[2] for r in rows], pa.int64()),
        }
    )


def window(end_s: int) -> dict[str, datetime]:
    return {"start": at(end_s - 10), "end": at(end_s)}


def test_lookup_aggregation_shows_its_windows_and_its_looked_up_values(run, tmp_path):
    code, runner = started(run, views())
    runner.batch(ad_deltas((10, "ad-1", 2, 5, 9), (10, "ad-2", 1, None, 8), (20, "ad-é", 3, -1, 15)))
    runner.batch(ad_deltas((10, "ad-2", 1, 7, 9), (20, "ad-x", 4, 1, 19), (20, "ad-2", 1, None, 18)))  # ad-x: none
    windows = [
        ({"window": window(10), "campaign": "c1"}, {"views": 4, "top": 7}),
        ({"window": window(20), "campaign": "c1"}, {"views": 1, "top": None}),  # its max saw no value
        ({"window": window(20), "campaign": "c2"}, {"views": 3, "top": -1}),
    ]
    key_type = pa.struct([("window", pa.struct([("start", TS), ("end", TS)])), ("campaign", pa.string())])
    read = read_state(code, dfs_url(tmp_path), runner.version)
    assert list(read) == ["default", "lookup"]  # the aggregation's store is the main one
    assert read == {
        "default": Store(key_type, pa.struct([("views", pa.int64()), ("top", pa.int64())]), expected(*windows)),
        "lookup": Store(*LOOKED_UP, expected(*[({"ad": ad}, {"campaign": c}) for ad, c in CAMPAIGNS.items()])),
    }


@pytest.mark.parametrize("mode", ["update", "append"])
def test_lookup_aggregation_restored_closes_windows_in_its_batch_without_data(run, mode: str):
    code, runner = started(run, views(delay="0s", mode=mode))
    runner.batch(ad_deltas((10, "ad-1", 2, 5, 9), (30, "ad-é", 1, 3, 25)))  # the next watermark: 25 s
    restarted = pickle.loads(code)
    restarted.restore(json.loads(json.dumps(runner.operator.metadata())))
    output = restarted.no_data_batch(runner.view).output
    windows = [int.from_bytes(k[:8], "big") // S for k, _ in runner.view.scan(b"", b"\xfe")]
    assert windows == [30]  # the window ending at 10 s closed
    closed = [{"window_start": at(0), "window_end": at(10), "campaign": "c1", "views": 2, "top": 5}]
    assert output.to_pylist() == (closed if mode == "append" else [])
    assert output.column_names == ["window_start", "window_end", "campaign", "views", "top"]


# ---------------------------------------------------------------------------------------------- before any row
NONE = (pa.struct([]), pa.struct([]))


@pytest.mark.parametrize(
    ("operator", "stores"),
    [
        (interval_join(), {"default": NONE}),
        (LookupJoin("k", ["k"], "side.jsonl"), {"default": SIDE_TABLE}),
        (TopN(["name"], ["price"], [("price", "descending")]), {"default": NONE}),
        (KeyedJoin("bid", "auction", "auction", "id", ("category", 10)), {"right": NONE, "waiting_left": NONE}),
        (views(), {"default": NONE, "lookup": LOOKED_UP}),
    ],
    ids=["interval join", "lookup join", "top n", "keyed join", "lookup aggregation"],
)
def test_a_version_before_any_row_shows_its_stores_without_columns_unless_their_types_are_fixed(operator, stores):
    fresh = pickle.loads(pickle.dumps(operator))
    fresh.restore(json.loads(json.dumps(operator.metadata())))
    assert [(s.name, (s.key, s.value)) for s in fresh.state_stores()] == list(stores.items())  # the main one first


# ------------------------------------------------------------------------------ restarts: a batch without data
def test_session_windows_restored_emit_what_their_batch_without_data_closes(run):
    """The deltas' schema travels with the version: before it did, a restored session aggregation's batch without data
    emitted and forgot nothing (an untyped empty table)."""
    code, runner = started(run, SessionAggregation(["k"], [Agg("n", "count", "*")], "session", "t", "0s"))
    ones = pa.array([1, 1], pa.int64())
    runner.batch(
        pa.table(
            {"k": ["a", "b"], SESSION_START: pa.array([0, 20 * S]), SESSION_END: pa.array([5 * S, 25 * S]), ROWS: ones,
             MAX_EVENT: pa.array([0, 20 * S]), "_v0": ones, "_c0": ones}
        )
    )  # fmt: skip  # the next watermark: 20 s, which closes a's session
    restarted = pickle.loads(code)
    restarted.restore(json.loads(json.dumps(runner.operator.metadata())))
    output = restarted.no_data_batch(runner.view).output
    assert output.to_pylist() == [{"window_start": at(0), "window_end": at(5), "k": "a", "n": 1}]


def test_a_deduplication_restored_gives_its_typed_rows_in_its_batch_without_data(run):
    """The rows' schema travels with the version: a restored deduplication's batch without data gives an empty table
    of its rows' columns (the sink's schema), and forgets the keys the watermark expired."""
    operator = Deduplicate(["k"], event_time="t", watermark_delay="5s", within_watermark=True)
    code, runner = started(run, operator)
    rows = pa.table({"k": ["a", "b"], "t": pa.array([0, 20 * S], TS), "v": pa.array([1, None], pa.int64())})
    runner.batch(rows)  # a expires at 5 s, b at 25 s; the next watermark: 15 s
    restarted = pickle.loads(code)
    restarted.restore(json.loads(json.dumps(runner.operator.metadata())))
    output = restarted.no_data_batch(runner.view).output
    assert output.schema == rows.schema and output.num_rows == 0
    stored = restarted.state_rows("default", *map(list, zip(*runner.view.scan(b"", b"\xfe"))))
    assert stored["key"].to_pylist() == [{"k": "b"}]
