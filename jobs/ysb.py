"""Yahoo Streaming Benchmark on the MiSA runtime, with Redis as the ad -> campaign store; or plain Spark (batch).

    spark-submit jobs/ysb.py --query ysb --input DIR --output DIR --checkpoint DIR
        [--state-dir DIR] [--dfs URL] [--mode sync|async-ckpt|misa|nocommit|native|native-default] [--trigger 3s]
        [--available-now] [--max-files-per-trigger K] [--output-mode update|append]
        [--watermark-delay 10s] [--quarantine DIR] [--metrics FILE] [--redis URL] [--native-stream]

Input: ``misa gen ysb`` ad events (JSON lines, ``event_time`` in epoch ms) and the ad -> campaign
mapping ``INPUT/_side/campaigns.json``. A record lacking ``ad_id``, ``event_type`` or
``event_time``, or with a field of the wrong type, is quarantined.

The query: the view events, each ad joined with its campaign, COUNT per campaign over 10 s tumbling
event-time windows; columns ``window_start, window_end, campaign_id, views``. The campaign of an ad
is read through the state (:class:`misa.operators.lookup_aggregation.LookupAggregation`); an ad the state
does not hold yet is looked up in Redis (one MGET per batch) and stored in the state. Without
``--redis`` the job starts a private ``redis-server`` with a random password and loads the mapping
into it (plain keys ``ad_id -> campaign_id``, as YSB does); with ``--redis URL`` the server must hold
them already (its password, if it has one, in the URL: ``redis://:PASSWORD@HOST:PORT/DB``); the
URL may instead come from the environment variable ``MISA_REDIS_URL``, which other users cannot list.
``--mode native`` is the reference: one plain Spark batch job over the same files, joined with
``campaigns.json``, written as batch 0 in the same Parquet layout. With ``--native-stream`` it is
a Spark Structured Streaming query instead (``misa bench live``): each batch's view events look their
campaign up in the same Redis, one MGET per partition and batch (no cache across batches), then Spark
counts them per window in its state store.
"""

from __future__ import annotations

import argparse
import json
import os
from contextlib import contextmanager
from typing import Callable, Iterator

import pandas as pd
import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from common.location import local_path
from jobs.gen.parts import SIDE_DIR
from jobs.gen.ysb import CAMPAIGNS_FILE
from jobs.kafka_output import with_kafka_output
from jobs.schemas import YSB_EVENTS
from jobs.stages import TimedFilter
from jobs.submit import (
    is_native,
    job_arguments,
    native_aggregation,
    peek_input,
    read_stream,
    run_batch_reference,
    run_job,
    run_misa,
    run_native,
)
from misa.io.quarantine import good_records, parse_json_lines
from misa.io.sink import ParquetBatchSink
from misa.operators.aggregation import Agg, Aggregation
from misa.operators.lookup_aggregation import LookupAggregation
from services.redis_server import RedisLookup, RedisServer, store_mapping

WINDOW = "10 seconds"
REQUIRED = ("ad_id", "event_type", "event_time")  # a record lacking one is bad
REDIS_URL_ENV = "MISA_REDIS_URL"  # --redis's default
KEY_COLUMNS = {"ysb": ("window_start", "window_end", "campaign_id")}
SORT_BY = (("window_start", "ascending"), ("campaign_id", "ascending"))


VIEWS = TimedFilter("event_time", "ms", "event_type", "view", into="event_ts")
"""The view events with their event timestamp ``event_ts`` (``event_time`` is in epoch ms)."""


def views(events: DataFrame) -> DataFrame:
    """The view events' ad, event time (epoch ms) and event timestamp ``event_ts``."""
    return VIEWS.spark(events).select("ad_id", "event_time", "event_ts")


def campaign_views(args: argparse.Namespace) -> Aggregation:
    """COUNT of views per campaign over 10 s tumbling windows of ``event_ts``."""
    return Aggregation(
        ["campaign_id"],
        [Agg("views", "count", "event_time")],
        event_time="event_ts",
        window=WINDOW,
        watermark_delay=args.watermark_delay,
        output_mode=args.output_mode,
    )


def read_campaigns(input_dir: str) -> dict[str, str]:
    """The ad -> campaign mapping of the input (``INPUT/_side/campaigns.json``)."""
    path = local_path(input_dir) / SIDE_DIR / CAMPAIGNS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the input needs the ad -> campaign mapping "
            "(misa gen ysb writes it), or give --redis URL of a server that holds it"
        )
    return json.loads(path.read_text())


@contextmanager
def redis_url(args: argparse.Namespace) -> Iterator[str]:
    """``--redis``, or a private redis-server loaded with the input's campaigns for the duration of the run
    (its URL carries its password: show it only through ``common.location.redact``)."""
    if args.redis:
        yield args.redis
        return
    with RedisServer() as server:
        with server.client() as client:
            store_mapping(client, read_campaigns(args.input))
        yield server.url


def reference(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The whole query as one plain Spark batch job over the input files and campaigns.json."""
    events = good_records(parse_json_lines(spark.read.text(args.input), YSB_EVENTS, REQUIRED))
    campaigns = spark.createDataFrame(list(read_campaigns(args.input).items()), "ad_id string, campaign_id string")
    counts = (
        views(events)
        .join(F.broadcast(campaigns), "ad_id")
        .groupBy(F.window("event_ts", WINDOW), "campaign_id")
        .agg(F.count("event_time").alias("views"))
    )
    return counts.select(
        F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "campaign_id", "views"
    )


def redis_campaigns(url: str) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """A ``mapInPandas`` function adding each view's ``campaign_id`` from Redis (one MGET per chunk of a
    partition; views of an ad Redis does not know are dropped, as the join drops them)."""

    def lookup(chunks: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        client = redis.Redis.from_url(url, decode_responses=True)
        try:
            for chunk in chunks:
                ads = chunk["ad_id"].unique().tolist()
                campaigns = dict(zip(ads, client.mget(ads))) if ads else {}
                chunk = chunk.assign(campaign_id=chunk["ad_id"].map(campaigns))
                yield chunk[chunk["campaign_id"].notna()]
        finally:
            client.close()

    return lookup


def native_stream(spark: SparkSession, args: argparse.Namespace, url: str) -> DataFrame:
    """The query in plain Spark Structured Streaming, its campaign lookups in Redis at ``url``."""
    events = views(read_stream(spark, args, YSB_EVENTS, REQUIRED))
    schema = StructType([*events.schema.fields, StructField("campaign_id", StringType())])
    return native_aggregation(campaign_views(args), events.mapInPandas(redis_campaigns(url), schema))


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Run the query with the parsed command line (also used in-process by the tests)."""
    sink = with_kafka_output(ParquetBatchSink(args.output, sort_by=SORT_BY), args)
    if is_native(args.mode) and not args.native_stream:
        run_batch_reference(reference(spark, args), args, sink)
        return
    if is_native(args.mode):
        with redis_url(args) as url:
            run_native(spark, args, native_stream(spark, args, url), sink)
        return
    with redis_url(args) as url:
        lookup = RedisLookup(url)
        try:
            run_misa(
                spark,
                args,
                read_stream(spark, args, YSB_EVENTS, REQUIRED),
                LookupAggregation("ad_id", campaign_views(args), lookup),
                views,
                sink,
                next_input=peek_input(spark, args, YSB_EVENTS, REQUIRED, hint_stage=VIEWS.arrow),
            )
        finally:
            lookup.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = job_arguments("Yahoo Streaming Benchmark: views per campaign in 10 s windows", ("ysb",))
    parser.add_argument(
        "--redis",
        default=os.environ.get(REDIS_URL_ENV) or None,
        help="URL of a Redis holding ad_id -> campaign_id keys, with its password if it has one "
        f"(redis://:PASSWORD@HOST:PORT/DB; default ${REDIS_URL_ENV}); without either: start a private "
        "redis-server with a random password and load INPUT/_side/campaigns.json into it",
    )
    parser.add_argument(
        "--native-stream",
        action="store_true",
        help="native modes: the reference as a streaming query whose lookups go to Redis, not one batch job",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    run_job(f"ysb-{args.mode}", args, run)


if __name__ == "__main__":
    main()
