"""NEXMark Q13, Q18, Q19 and Q20 on the MiSA runtime or plain Spark.

    spark-submit jobs/nexmark.py --query q13|q18|q19|q20 --input DIR --output DIR --checkpoint DIR
        [--state-dir DIR] [--dfs URL] [--mode sync|async-ckpt|misa|nocommit|native|native-default] [--trigger 3s]
        [--available-now] [--max-files-per-trigger K] [--output-mode update|append]
        [--quarantine DIR] [--metrics FILE] [--side PATH]

Input: ``misa gen nexmark`` events, JSON lines ``{"event_type": 0|1|2, "person", "auction", "bid"}``
(times in epoch ms), and for Q13 the side table ``INPUT/_side/side_input.jsonl`` (``--side``). A
record is bad (quarantined, see :mod:`misa.io.quarantine`) when it does not parse, a field has the
wrong type, ``event_type`` is missing, or its event's object or one of that object's
:data:`REQUIRED_FIELDS` is missing or null. ``--watermark-delay`` is accepted but unused: no query
has event-time windows.

* Q13, bounded side input join: each bid with the side row whose key is ``auction % side_rows``
  (SQL's %; ``side_rows``: the side table's row count). Columns ``auction, bidder, price,
  date_time, value``; append output. The side table is kept in the state
  (:class:`misa.operators.keyed.LookupJoin`).
* Q18, the last bid of each (bidder, auction): the bid with the latest ``date_time``; ties go to
  the larger whole record ``(date_time, price, channel, url, extra)``, strings compared as UTF-8
  bytes, null below any value (Spark's ``max(struct(...))``). Columns ``bidder, auction, price,
  channel, url, date_time, extra``; update output: a key's row whenever it has a bid in the batch.
* Q19, the top 10 bids of each auction by price; ties: the earlier ``date_time`` first, then the
  smaller ``bidder`` (identical bids take consecutive ranks). Columns ``auction, rank, price,
  bidder, date_time`` (rank 1..10); update output: every rank of each auction with a bid in the
  batch, as Spark's update output emits every group with input. Ranks only fill up and are
  replaced, never removed, so the last row per (auction, rank) is the final top 10.
* Q20, each bid with its auction where the auction's category is 10 (an inner join on
  ``bid.auction = auction.id``, each pair once whichever comes first). Columns: the bid's
  ``auction, bidder, price, channel, url, date_time, extra``, then the auction's ``item_name,
  description, initial_bid, reserve, auction_date_time, expires, seller, category,
  auction_extra``; append output.

``--mode native`` is the reference in plain Spark: Q13 one batch job over the same files and side
table (a DataFrame join), written as batch 0; Q18 and Q19 streaming aggregations in update mode
(``max(struct(...))``; ``slice(sort_array(collect_list(struct(...))), 1, 10)`` exploded into
ranks); Q20 Spark's stream-stream inner join in append mode.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import reduce
from typing import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from common.location import local_path
from jobs.gen.nexmark import SIDE_INPUT
from jobs.gen.parts import SIDE_DIR
from jobs.kafka_output import with_kafka_output
from jobs.schemas import NEXMARK_BID, NEXMARK_EVENTS, NEXMARK_SIDE_INPUT
from jobs.submit import (
    is_native,
    job_arguments,
    peek_input,
    read_stream,
    run_batch_reference,
    run_job,
    run_misa,
    run_native,
)
from misa.io.quarantine import BAD_COLUMN, good_records, parse_json_lines
from misa.io.sink import ParquetBatchSink
from misa.operators.base import StatefulOperator
from misa.operators.keyed import KeyedJoin, LookupJoin, TopN

PERSON, AUCTION, BID = 0, 1, 2
# per event type: its object and the fields without which the record is bad
REQUIRED_FIELDS = {
    PERSON: ("person", ("id", "date_time")),
    AUCTION: ("auction", ("id", "seller", "category", "date_time")),
    BID: ("bid", ("auction", "bidder", "price", "date_time")),
}
TOP_N = 10
BID_KEY = ("auction", "bidder", "price", "date_time")  # the bid columns of Q13, and a bid's identity in Q13 and Q20
Q18_COLUMNS = ("price", "channel", "url", "date_time", "extra")  # compared in this order, after date_time
Q20_CATEGORY = 10
AUCTION_PREFIX = "auction_"  # Q20: the auction's columns whose names a bid's column has


def complete_event() -> Column:
    """True for a record whose event object and that object's required fields are present (never null)."""
    complete = [
        reduce(
            lambda a, b: a & b,
            [F.col(f"{name}.{f}").isNotNull() for f in fields],
            (F.col("event_type") == kind) & F.col(name).isNotNull(),
        )
        for kind, (name, fields) in REQUIRED_FIELDS.items()
    ]
    return F.coalesce(reduce(lambda a, b: a | b, complete), F.lit(False))


def read_events(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The input as a stream of events; incomplete events are bad records (native mode: left out)."""
    stream = read_stream(spark, args, NEXMARK_EVENTS, ("event_type",))
    if is_native(args.mode):
        return stream.where(complete_event())
    return mark_incomplete(stream)


def mark_incomplete(events: DataFrame) -> DataFrame:
    """Parsed events with the incomplete ones marked bad."""
    return events.withColumn(BAD_COLUMN, F.col(BAD_COLUMN) | ~complete_event())


def read_events_batch(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The input's good events as one batch DataFrame (for the batch reference)."""
    parsed = parse_json_lines(spark.read.text(args.input), NEXMARK_EVENTS, ("event_type",))
    return good_records(parsed).where(complete_event())


def bids(events: DataFrame) -> DataFrame:
    return events.where(F.col("event_type") == BID).select("bid.*")


def bids_and_auctions(events: DataFrame) -> DataFrame:
    return events.where(F.col("event_type").isin(AUCTION, BID))


def side_path(args: argparse.Namespace) -> str:
    """``--side``, by default ``INPUT/_side/side_input.jsonl``."""
    return args.side or str(local_path(args.input) / SIDE_DIR / SIDE_INPUT)


# ---------------------------------------------------------------------------------------------- Q13
def q13_operator(args: argparse.Namespace) -> LookupJoin:
    return LookupJoin("auction", BID_KEY, side_path(args), time_column="date_time")


def q13_native(events: DataFrame, args: argparse.Namespace) -> DataFrame:
    side = events.sparkSession.read.schema(NEXMARK_SIDE_INPUT).json(side_path(args))
    side_rows = side.count()
    joined = bids(events).join(F.broadcast(side), (F.col("auction") % side_rows) == F.col("key"))
    return joined.select(*BID_KEY, "value")


# ---------------------------------------------------------------------------------------------- Q18
def q18_operator(args: argparse.Namespace) -> TopN:
    return TopN(
        ["bidder", "auction"],
        Q18_COLUMNS,
        [
            ("date_time", "descending"),
            ("price", "descending"),
            ("channel", "descending"),
            ("url", "descending"),
            ("extra", "descending"),
        ],
        time_column="date_time",
    )


def q18_native(events: DataFrame, args: argparse.Namespace) -> DataFrame:
    latest = (
        bids(events)
        .groupBy("bidder", "auction")
        .agg(F.max(F.struct("date_time", "price", "channel", "url", "extra")).alias("latest"))
    )
    return latest.select("bidder", "auction", *[F.col(f"latest.{c}").alias(c) for c in Q18_COLUMNS])


# ---------------------------------------------------------------------------------------------- Q19
def q19_operator(args: argparse.Namespace) -> TopN:
    return TopN(
        ["auction"],
        ["price", "bidder", "date_time"],
        [("price", "descending"), ("date_time", "ascending"), ("bidder", "ascending")],
        n=TOP_N,
        rank_column="rank",
        time_column="date_time",
    )


def q19_native(events: DataFrame, args: argparse.Namespace) -> DataFrame:
    """Descending (price, -date_time, -bidder): the highest price first, then the earlier, then the smaller bidder."""
    ranked = F.struct("price", (-F.col("date_time")).alias("t"), (-F.col("bidder")).alias("b"))
    top = (
        bids(events)
        .groupBy("auction")
        .agg(F.slice(F.sort_array(F.collect_list(ranked), asc=False), 1, TOP_N).alias("top"))
    )
    exploded = top.select("auction", F.posexplode("top").alias("pos", "bid"))
    return exploded.select(
        "auction",
        (F.col("pos") + 1).cast("int").alias("rank"),
        F.col("bid.price").alias("price"),
        (-F.col("bid.b")).alias("bidder"),
        (-F.col("bid.t")).alias("date_time"),
    )


# ---------------------------------------------------------------------------------------------- Q20
def q20_operator(args: argparse.Namespace) -> KeyedJoin:
    return KeyedJoin(
        "bid",
        "auction",
        "auction",
        "id",
        ("category", Q20_CATEGORY),
        right_prefix=AUCTION_PREFIX,
        time_column="date_time",
    )


def q20_native(events: DataFrame, args: argparse.Namespace) -> DataFrame:
    auctions = events.where((F.col("event_type") == AUCTION) & (F.col("auction.category") == Q20_CATEGORY))
    fields = [f for f in auctions.schema["auction"].dataType.names if f != "id"]
    auctions = auctions.select(
        F.col("auction.id").alias("_id"),
        *[F.col(f"auction.{f}").alias(AUCTION_PREFIX + f if f in NEXMARK_BID.names else f) for f in fields],
    )
    return bids(events).join(auctions, F.col("auction") == F.col("_id")).drop("_id")


# ------------------------------------------------------------------------------------------- queries
@dataclass(frozen=True)
class NexmarkQuery:
    """One query: its stateful operator on the runtime and its plain-Spark reference."""

    output_mode: str
    key_columns: tuple[str, ...]  # a row's identity in the output (misa.io.sink.final_results)
    sort_by: tuple[tuple[str, str], ...]  # the order of each batch's output rows
    upstream: Callable[[DataFrame], DataFrame]
    operator: Callable[[argparse.Namespace], StatefulOperator]
    native: Callable[[DataFrame, argparse.Namespace], DataFrame]
    batch_reference: bool = False  # native mode runs one batch job, not a stream


BID_ORDER = (("date_time", "ascending"), ("auction", "ascending"), ("bidder", "ascending"), ("price", "ascending"))
QUERIES = {
    "q13": NexmarkQuery("append", BID_KEY, BID_ORDER, bids, q13_operator, q13_native, batch_reference=True),
    "q18": NexmarkQuery(
        "update",
        ("bidder", "auction"),
        (("bidder", "ascending"), ("auction", "ascending")),
        bids,
        q18_operator,
        q18_native,
    ),
    "q19": NexmarkQuery(
        "update", ("auction", "rank"), (("auction", "ascending"), ("rank", "ascending")), bids, q19_operator, q19_native
    ),
    "q20": NexmarkQuery("append", BID_KEY, BID_ORDER, bids_and_auctions, q20_operator, q20_native),
}
KEY_COLUMNS = {name: query.key_columns for name, query in QUERIES.items()}


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Run one query with the parsed command line (also used in-process by the tests)."""
    query = QUERIES[args.query]
    sink = with_kafka_output(ParquetBatchSink(args.output, sort_by=query.sort_by), args)
    if not is_native(args.mode):
        peek = peek_input(spark, args, NEXMARK_EVENTS, ("event_type",), mark_incomplete)
        run_misa(spark, args, read_events(spark, args), query.operator(args), query.upstream, sink, next_input=peek)
    elif query.batch_reference:
        run_batch_reference(query.native(read_events_batch(spark, args), args), args, sink)
    else:
        run_native(spark, args, query.native(read_events(spark, args), args), sink)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``--output-mode`` is the query's own (q13, q20: append; q18, q19: update)."""
    parser = job_arguments("NEXMark Q13, Q18, Q19, Q20", tuple(QUERIES), output_mode=None)
    parser.add_argument(
        "--side", help="Q13's side table, JSON lines {key, value} (default: INPUT/_side/side_input.jsonl)"
    )
    args = parser.parse_args(argv)
    mode = QUERIES[args.query].output_mode
    if args.output_mode is None:
        args.output_mode = mode
    elif args.output_mode != mode:
        parser.error(f"--query {args.query} supports --output-mode {mode} only")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_job(f"nexmark-{args.query}-{args.mode}", args, run)


if __name__ == "__main__":
    main()
