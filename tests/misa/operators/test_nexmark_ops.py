"""The keyed operators (misa.operators.keyed) on hand-made Arrow data, with a real state store.

Each batch is committed (sync) like the runtime does, so a restart can load a version and the
operator's metadata, and go on.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from jobs import nexmark
from misa.operators.keyed import KeyedJoin, LookupJoin, TopN
from misa.state.view import StateView

BID = pa.struct(
    [
        ("auction", pa.int64()),
        ("bidder", pa.int64()),
        ("price", pa.int64()),
        ("channel", pa.string()),
        ("url", pa.string()),
        ("date_time", pa.int64()),
        ("extra", pa.string()),
    ]
)
AUCTION = pa.struct(
    [
        ("id", pa.int64()),
        ("item_name", pa.string()),
        ("date_time", pa.int64()),
        ("category", pa.int64()),
        ("extra", pa.string()),
    ]
)


def bids(*rows: tuple) -> pa.Table:
    """rows: (auction, bidder, price, date_time[, channel[, url[, extra]]]); channel, url, extra default to c, u, x."""
    records = []
    for auction, bidder, price, date_time, *text in rows:
        channel, url, extra = [*text, *("c", "u", "x")[len(text) :]]
        records.append(
            {
                "auction": auction,
                "bidder": bidder,
                "price": price,
                "channel": channel,
                "url": url,
                "date_time": date_time,
                "extra": extra,
            }
        )
    return pa.Table.from_pylist(records, schema=pa.schema(list(BID)))


# ---------------------------------------------------------------------------------------------- Q13
def q13(side: Path) -> LookupJoin:
    """The job's Q13 operator over the side table at ``side``."""
    return nexmark.q13_operator(argparse.Namespace(side=str(side), input=None))


def enriched(result) -> list[tuple]:
    return sorted((r["auction"], r["bidder"], r["value"]) for r in result.output.to_pylist())


def test_lookup_join_enriches_each_row_and_counts_rows_without_a_side_row(run, side):
    runner = run(q13(side))
    table = bids((13, 1, 5, 100), (20, 2, 6, 101), (-7, 3, 7, 102), (None, 4, 8, 103), (13, 5, 9, 104))
    result = runner.batch(table.select(["auction", "bidder", "price", "date_time"]))
    # 13 % 10 = 3; SQL's % keeps the key's sign, so -7 names no side row; a null key none either
    assert enriched(result) == [(13, 1, "v3"), (13, 5, "v3"), (20, 2, "v0")]
    assert result.output.column_names == ["auction", "bidder", "price", "date_time", "value"]
    assert result.dropped_rows == 2 and runner.operator.metadata() == {"side_rows": 10, "dropped_rows": 2}
    assert len(runner.keys(b"s")) == 10  # the side table lives in the state


def test_side_table_is_loaded_once_and_restored_with_the_state(run, side):
    runner = run(q13(side))
    runner.batch(bids((1, 1, 1, 1)).select(["auction", "bidder", "price", "date_time"]))
    side.write_text('{"key": 1, "value": "changed"}\n')  # neither a later batch nor a restart rereads it
    assert enriched(runner.batch(bids((11, 2, 1, 2)).select(["auction", "bidder", "price", "date_time"]))) == [
        (11, 2, "v1")
    ]
    side.unlink()
    resumed = run(q13(side), version=1)
    assert resumed.operator.side_rows == 10
    assert enriched(resumed.batch(bids((21, 3, 1, 3)).select(["auction", "bidder", "price", "date_time"]))) == [
        (21, 3, "v1")
    ]
    with pytest.raises(FileNotFoundError, match="side.jsonl is missing: a fresh state loads it"):
        q13(side).apply(bids((1, 1, 1, 1)), StateView(resumed.store))


def test_side_table_keys_must_be_unique(run, side):
    side.write_text('{"key": 1, "value": "a"}\n{"key": 1, "value": "b"}\n')
    with pytest.raises(ValueError, match="key must be present and unique"):
        run(q13(side)).batch(bids((1, 1, 1, 1)).select(["auction", "bidder", "price", "date_time"]))


# ---------------------------------------------------------------------------------------------- Q18
def q18() -> TopN:
    """The job's Q18 operator (it reads no argument)."""
    return nexmark.q18_operator(argparse.Namespace())


def latest(result) -> dict[tuple, tuple]:
    return {
        (r["bidder"], r["auction"]): (r["date_time"], r["price"], r["channel"], r["extra"])
        for r in result.output.to_pylist()
    }


def q18_rows(table: pa.Table) -> pa.Table:
    return table.select(["bidder", "auction", *nexmark.Q18_COLUMNS])


def test_latest_bid_wins_across_batches_and_each_key_with_a_bid_is_emitted(run):
    runner = run(q18())
    first = runner.batch(q18_rows(bids((1, 7, 10, 5), (1, 7, 99, 3), (2, 7, 1, 1))))
    assert latest(first) == {(7, 1): (5, 10, "c", "x"), (7, 2): (1, 1, "c", "x")}
    assert first.output.column_names == ["bidder", "auction", "price", "channel", "url", "date_time", "extra"]
    # older than the stored bid: the stored one stays, emitted again as Spark's update output emits a key with input
    assert latest(runner.batch(q18_rows(bids((1, 7, 50, 4))))) == {(7, 1): (5, 10, "c", "x")}
    assert latest(runner.batch(q18_rows(bids((1, 7, 20, 9), (2, 8, 2, 2))))) == {
        (7, 1): (9, 20, "c", "x"),
        (8, 2): (2, 2, "c", "x"),
    }
    assert len(runner.keys()) == 3


def test_latest_bid_ties_are_broken_by_the_whole_record_whatever_the_arrival_order(run):
    tied = [(1, 7, 10, 5, "A"), (1, 7, 10, 5, "B"), (1, 7, 9, 5, "C"), (1, 7, 10, 5, "B", "u", None)]
    for order in ([0, 1, 2, 3], [3, 2, 1, 0]):
        runner = run(q18())
        outputs = [latest(runner.batch(q18_rows(bids(tied[i])))) for i in order]
        # same date_time: the higher price, then the larger channel; a null extra ranks below "x"
        assert {k: v for out in outputs for k, v in out.items()} == {(7, 1): (5, 10, "B", "x")}
        runner.close()
    together = run(q18()).batch(q18_rows(bids(*tied)))
    assert latest(together) == {(7, 1): (5, 10, "B", "x")}


# ---------------------------------------------------------------------------------------------- Q19
def q19() -> TopN:
    """The job's Q19 operator: the top ``nexmark.TOP_N`` (10) bids per auction."""
    return nexmark.q19_operator(argparse.Namespace())


def q19_rows(table: pa.Table) -> pa.Table:
    return table.select(["auction", "price", "bidder", "date_time"])


def ranks(result) -> dict[tuple, tuple]:
    return {(r["auction"], r["rank"]): (r["price"], r["bidder"], r["date_time"]) for r in result.output.to_pylist()}


def test_top_ten_bids_are_kept_across_batches_and_lower_bids_evicted(run):
    runner = run(q19())
    final: dict[tuple, tuple] = {}  # as misa.io.sink.final_results keyed by (auction, rank) sees the output
    first = runner.batch(q19_rows(bids(*[(1, 100 + p, p, p) for p in range(1, 13)], (2, 5, 7, 1))))
    assert first.output.column_names == ["auction", "rank", "price", "bidder", "date_time"]
    assert [v[0] for k, v in sorted(ranks(first).items()) if k[0] == 1] == list(range(12, 2, -1))
    final.update(ranks(first))
    # below the tenth: the top 10 stays, and is emitted again (Spark's update output emits each group with input)
    assert ranks(runner.batch(q19_rows(bids((1, 9, 2, 50))))) == {k: v for k, v in ranks(first).items() if k[0] == 1}
    third = runner.batch(q19_rows(bids((1, 9, 100, 60), (2, 6, 1, 61))))
    assert sorted(k[0] for k in ranks(third)) == [1] * 10 + [2] * 2  # every rank of each auction with a bid
    final.update(ranks(third))
    assert [final[1, r][0] for r in range(1, 11)] == [100, *range(12, 3, -1)]  # 3 is evicted
    assert [final[2, r][0] for r in (1, 2)] == [7, 1]
    stored = runner.view.get_many(runner.keys())
    assert [len(runner.operator._records.decode([v])[0]) for v in stored] == [10, 2]


def test_top_n_ties_rank_the_earlier_then_the_smaller_bidder_first(run):
    runner = run(q19())
    runner.batch(q19_rows(bids((1, 8, 50, 9), (1, 9, 50, 8))))
    result = runner.batch(q19_rows(bids((1, 7, 50, 9), (1, 1, 40, 1))))
    assert [ranks(result)[1, r] for r in range(1, 5)] == [(50, 9, 8), (50, 7, 9), (50, 8, 9), (40, 1, 1)]


def test_top_n_order_must_cover_every_column():
    with pytest.raises(ValueError, match="must name each of the columns"):
        TopN(["auction"], ["price", "bidder"], [("price", "descending")])
    with pytest.raises(ValueError, match="n must be >= 1"):
        TopN(["auction"], ["price"], [("price", "descending")], n=0)


# ---------------------------------------------------------------------------------------------- Q20
def q20() -> KeyedJoin:
    """The job's Q20 operator: bids joined with their auction of category ``nexmark.Q20_CATEGORY`` (10)."""
    return nexmark.q20_operator(argparse.Namespace())


def events(*rows: tuple) -> pa.Table:
    """rows: ("a", id, category) or ("b", auction, bidder): each event in its struct column."""
    bid_rows = [dict(zip(BID.names, (r[1], r[2], 1, "c", "u", r[2], "x"))) if r[0] == "b" else None for r in rows]
    auction_rows = [
        {"id": r[1], "item_name": f"item{r[1]}", "date_time": 1, "category": r[2], "extra": "e"}
        if r[0] == "a"
        else None
        for r in rows
    ]
    return pa.table({"bid": pa.array(bid_rows, BID), "auction": pa.array(auction_rows, AUCTION)})


def pairs(result) -> list[tuple]:
    return sorted((r["auction"], r["bidder"], r["item_name"]) for r in result.output.to_pylist())


def test_bids_join_their_auction_whether_before_after_or_in_the_same_batch(run):
    runner = run(q20())
    first = runner.batch(events(("b", 1, 100), ("a", 2, 10), ("b", 2, 101), ("b", 3, 102)))
    assert pairs(first) == [(2, 101, "item2")]
    assert first.output.column_names == [
        "auction",
        "bidder",
        "price",
        "channel",
        "url",
        "date_time",
        "extra",
        "item_name",
        "auction_date_time",
        "category",
        "auction_extra",
    ]
    assert len(runner.keys(b"l")) == 2  # bids on auctions 1 and 3 wait
    second = runner.batch(events(("b", 1, 103), ("a", 1, 10), ("b", 2, 104)))
    assert pairs(second) == [(1, 100, "item1"), (1, 103, "item1"), (2, 104, "item2")]
    assert len(runner.keys(b"l")) == 1  # auction 1's waiting list is gone
    third = runner.batch(events(("a", 3, 10), ("b", 3, 105)))
    assert pairs(third) == [(3, 102, "item3"), (3, 105, "item3")]
    assert runner.keys(b"l") == [] and runner.batch(events(("b", 4, 1))).output.num_rows == 0


def test_other_categories_are_dropped_at_once_and_nothing_is_joined_twice(run):
    runner = run(q20())
    runner.batch(events(("b", 5, 200), ("b", 6, 201)))
    assert pairs(runner.batch(events(("a", 5, 11), ("a", 6, 10), ("b", 5, 202)))) == [(6, 201, "item6")]
    assert runner.keys(b"l") == []  # bids on auction 5 (category 11) were not kept
    assert pairs(runner.batch(events(("b", 5, 203), ("b", 6, 204)))) == [(6, 204, "item6")]
    assert runner.batch(events(("b", 5, 205))).output.num_rows == 0 and runner.keys(b"l") == []


def test_repeated_auctions_and_null_keys_are_counted(run):
    runner = run(q20())
    result = runner.batch(events(("a", 1, 10), ("a", 1, 12), ("b", None, 1), ("a", None, 10)))
    assert result.dropped_rows == 3
    result = runner.batch(events(("a", 1, 10), ("b", 1, 2)))
    assert result.dropped_rows == 1 and pairs(result) == [(1, 2, "item1")]
    assert runner.operator.metadata()["dropped_rows"] == 4


def test_keyed_join_resumes_from_a_version(run):
    runner = run(q20())
    runner.batch(events(("b", 1, 100), ("a", 2, 10), ("a", 3, 10), ("a", 3, 10)))
    runner.batch(events(("b", 2, 101)))
    resumed = run(q20(), version=0)  # replay the second batch (version 1) from version 0
    assert resumed.operator.dropped_rows == 1
    assert pairs(resumed.batch(events(("b", 2, 101), ("a", 1, 10)))) == [(1, 100, "item1"), (2, 101, "item2")]


def test_metadata_round_trips(side):
    lookup = q13(side)
    lookup.side_rows, lookup.dropped_rows = 10, 3
    other = q13(side)
    other.restore(lookup.metadata())
    assert (other.side_rows, other.dropped_rows) == (10, 3)
    fresh = q13(side)
    fresh.restore({})
    assert fresh.side_rows is None  # a fresh state: the first batch loads the side table
    join, resumed = q20(), q20()
    join.dropped_rows = 2
    resumed.restore(join.metadata())
    assert resumed.dropped_rows == 2
    top = q19()
    top.restore(top.metadata())


def test_empty_batches_give_typed_empty_output(run, side):
    for operator, table, columns in [
        (q13(side), bids().select(list(nexmark.BID_KEY)), 5),
        (q18(), q18_rows(bids()), 7),
        (q19(), q19_rows(bids()), 5),
        (q20(), events(), 11),
    ]:
        result = run(operator).batch(table)
        assert result.output.num_rows == 0 and len(result.output.column_names) == columns


def test_with_repeated_right_keys_every_pair_joins_once_as_in_spark(run):
    """unique_right=False: Spark's inner join. Over random batches (repeated auction ids, bids before, after and
    with their auctions, other categories), the batches' outputs are every matching (bid, auction) pair once."""
    rng = random.Random(3)
    operator = KeyedJoin(
        "bid", "auction", "auction", "id", ("category", 10), right_prefix="auction_", unique_right=False
    )
    runner = run(operator)
    seen: list[tuple] = []
    got: Counter = Counter()
    bidder = 0
    for _ in range(6):
        batch = []
        for _ in range(rng.randint(1, 8)):
            bidder += 1
            batch.append(
                ("a", rng.randint(1, 4), rng.choice((10, 10, 11)))
                if rng.random() < 0.4
                else ("b", rng.randint(1, 4), bidder)
            )
        seen += batch
        got.update((r["auction"], r["bidder"], r["category"]) for r in runner.batch(events(*batch)).output.to_pylist())
    expected = Counter(
        (b[1], b[2], a[2]) for b in seen if b[0] == "b" for a in seen if a[0] == "a" and a[1] == b[1] and a[2] == 10
    )
    assert got == expected and sum(expected.values()) > 10
