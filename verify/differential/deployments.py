"""Random queries as users deploy them, drawn independently of what misa runs: ``misa fuzz --deployments``.

A :class:`Deployment` is drawn from a seed, shape by shape, each shape from the whole of what Spark runs and users
write, not from misa's operators:

* **source**: one folder of JSON files, a glob (``in/*.json``), files in subfolders (``in/day=N/``), the tests'
  Python source with a backlog (Kafka's stand-in, :mod:`verify.differential.topic_source`), ``rate-micro-batch``,
  two folders (two different streams, for a union or a join);
* **plan** below the stateful step: as read, columns renamed (one with a space), a filter, a join with a static
  table, a union of two watermarked streams;
* **stateful step**: tumbling and sliding windows, a global aggregation, session windows, the three
  deduplications, an inner and a left outer join of two streams;
* **a filter on the key Spark's optimizer moves below the watermark**: none, one above the stateful step, or (for a
  join) one on the left side before the join, which Spark also infers for the right side;
* **keys and aggregates**: a column, an expression (``k % 3``), a struct field; ``count(*)``, ``sum``, ``avg``,
  ``stddev``, an expression over aggregates;
* **trigger and rounds**: ``availableNow``, ``once``, processing time with files arriving between triggers, and
  ``processingTime`` 0 for a source that always has input; one to three runs over one checkpoint (restarts);
* **where misa keeps the state**: the driver, or (a third of the cases) a state host on the executors;
* **one stream split by filters** (issue 61; a fifth of the cases, every case with ``--split-only``): into the two
  sides of a join of two streams or into two branches unioned before the stateful step; the branches' filters on
  the key, on the row's ``side`` field, on the value or on the event time, placed above ``withWatermark`` (one
  node both branches read) or below it (a ``withWatermark`` per branch); both branches from one read, or the second
  from a second ``readStream`` of the same source, with the same projections or other ones
  (:func:`drawn_split`). An event-time filter above the watermark counts its dropped rows in Spark's watermark,
  before a join as before the other steps.
* **Kafka sources** (issue 62; two cases in five, every case with ``--kafka-only``): the source becomes topics of
  the project's broker (one per stream, a fresh one per case and engine: :mod:`verify.differential.kafka_inputs`)
  with 1 to 4 partitions, the records partitioned by key, the keys even or skewed to one; ``startingOffsets``
  earliest or per partition in JSON (earliest, latest or an offset); no admission limit, ``maxOffsetsPerTrigger``,
  or (under processing time) ``minOffsetsPerTrigger`` with a ``maxTriggerDelay`` longer than the run; the value
  decoded with ``from_json``; the event time the value's field or Kafka's ``timestamp``; Kafka's own columns
  (partition, offset, timestamp, topic) kept through the query, as columns of a deduplication's or a join's rows, or as
  aggregates of a window's (:func:`drawn_kafka`). Every other draw stays (triggers, placements, splits, the
  shapes misa refuses at start).

Each case runs through plain Spark and through misa (:func:`verify.differential.scenarios.run_scenario`): a query
Spark refuses must be refused by misa at start; one misa refuses must be refused at start with
``UnsupportedQueryError``; every other one must give Spark's batches and rows.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from verify.differential.cases import drawn_placement
from verify.differential.kafka_inputs import KafkaInputs, topic_name
from verify.differential.scenarios import Round, Rows, Scenario
from verify.differential.topic_source import TopicSource

SCHEMA = "t timestamp, k int, v bigint, s string, st struct<a:int,b:string>"
SOURCES = ("folder", "glob", "subfolders", "topic", "rate", "two_folders")
PLANS = ("as_read", "renamed", "filter", "static", "union")
STATEFUL = ("tumbling", "sliding", "global", "session", "dedup", "dedup_time", "dedup_within", "join", "outer_join")
KEYS = ("column", "expression", "struct_field")
AGGREGATES = ("count", "sum", "avg", "stddev", "over_aggregates")
TRIGGERS = ("availableNow", "once", "processingTime")
MODES = ("append", "update", "complete")
KEY_FILTERS = ("none", "above", "one_side")
SPLITS = ("none", "join", "union")
SPLIT_ON = ("key", "side", "value", "time")
SPLIT_AT = ("above", "below")
SPLIT_FROM = ("one_read", "two_reads", "two_reads_other_projection")
SPLIT_SOURCES = ("folder", "glob", "subfolders", "topic", "rate")
SPLIT_SHARE = 0.2  # of the cases, without --split-only
KAFKA_SHARE = 0.4  # of the cases, without --kafka-only
KAFKA_SKEW = ("even", "skewed")  # the records' keys (a topic's records are partitioned by key)
KAFKA_START = ("earliest", "json")  # startingOffsets: "earliest", or per partition in JSON
KAFKA_LIMITS = ("none", "maxOffsetsPerTrigger", "minOffsetsPerTrigger")  # the last with maxTriggerDelay
KAFKA_TIME = ("value", "timestamp")  # the event time: the value's field, or Kafka's timestamp of the record
KAFKA_COLUMNS = ("partition", "offset", "timestamp", "topic")  # Kafka's own columns a query may keep
# With minOffsetsPerTrigger: longer than any run, so that the minimum alone decides when a batch runs (and each run's
# first trigger, which Spark never delays). A delay that can expire while a run waits for quiet before producing
# (30 s: two runs under load averages over 100) makes a batch's records depend on the clock, not on the engine.
KAFKA_MAX_TRIGGER_DELAY = "600s"
# Each branch's filter, SQL over the source's columns: overlapping for the key and the value (a join finds pairs, a
# union counts a row twice), disjoint for the side and the event time's second (a row of side 2 goes to neither).
SPLIT_FILTERS = {
    "key": ("k >= 1", "k <= 2"),
    "side": ("side = 0", "side = 1"),
    "value": ("v < 12", "v >= 3"),
    "time": ("second(t) % 2 = 0", "second(t) % 2 = 1"),
}


@dataclass(frozen=True)
class Deployment:
    """One random deployment: its shapes, its watermark delay and window size (seconds), and its input rounds."""

    seed: int
    source: str
    plan: str
    stateful: str
    key: str
    aggregate: str
    trigger: str
    output_mode: str
    delay_s: int
    window_s: int
    rounds: tuple[Round, ...]
    key_filter: str = "none"
    placement: str = "driver"  # spark.misa.state.placement
    split: str = "none"  # one stream split by filters into a join's sides or a union's branches (SPLITS)
    split_on: str = ""  # what the branches' filters read (SPLIT_ON)
    split_at: str = ""  # above withWatermark or below it (SPLIT_AT)
    split_from: str = ""  # one read, or a second read of the source with the same or other projections (SPLIT_FROM)
    kafka_partitions: int = 0  # source "kafka": each topic's partitions
    kafka_skew: str = ""  # KAFKA_SKEW
    kafka_start: tuple[
        tuple[str, tuple[int, ...]], ...
    ] = ()  # per topic, each partition's offset (-2, -1, n); () earliest
    kafka_limit: str = ""  # KAFKA_LIMITS
    kafka_limit_n: int = 0  # maxOffsetsPerTrigger, or minOffsetsPerTrigger
    kafka_time: str = ""  # KAFKA_TIME
    kafka_columns: tuple[str, ...] = ()  # of KAFKA_COLUMNS, kept in the query
    bootstrap: str = field(default="", compare=False)  # the broker the case runs on (not a draw)

    @property
    def tags(self) -> tuple[str, ...]:
        """The shapes drawn, for coverage counts."""
        names = ["source", "plan", "stateful", "key", "aggregate", "key_filter", "trigger", "output_mode", "placement"]
        if self.stateful not in ("tumbling", "sliding", "global", "session"):
            names.remove("aggregate")
        if self.stateful in ("join", "outer_join"):
            names.remove("key")
        names += ["split"] + (["split_on", "split_at", "split_from"] if self.split != "none" else [])
        tags = [f"{name}:{getattr(self, name)}" for name in names] + [f"rounds:{len(self.rounds)}"]
        if self.source == "kafka":
            tags += [
                f"kafka_partitions:{self.kafka_partitions}",
                f"kafka_skew:{self.kafka_skew}",
                f"kafka_start:{'json' if self.kafka_start else 'earliest'}",
                f"kafka_limit:{self.kafka_limit}",
                f"kafka_time:{self.kafka_time}",
                f"kafka_trigger:{self.trigger}",
                f"kafka_placement:{self.placement}",
            ]
            tags += [f"kafka_column:{name}" for name in self.kafka_columns] or ["kafka_column:none"]
            starts = {o for _, offsets in self.kafka_start for o in offsets}
            tags += [f"kafka_start_offset:{ {-2: 'earliest', -1: 'latest'}.get(o, 'n') }" for o in sorted(starts)]
        return tuple(dict.fromkeys(tags))

    def describe(self) -> str:
        return f"seed {self.seed}: " + " ".join(tag.split(":", 1)[1] for tag in self.tags)

    def scenario(self, bootstrap: str = "") -> Scenario:
        """The case as a scenario; ``bootstrap``: the broker of a Kafka case's topics."""
        if self.source == "kafka":
            if not bootstrap:
                raise ValueError(f"seed {self.seed} reads Kafka: give the broker's bootstrap servers")
            return replace(self, bootstrap=bootstrap)._scenario()
        return self._scenario()

    def _scenario(self) -> Scenario:
        trigger: dict[str, Any] = {"availableNow": True}
        if self.trigger == "once":
            trigger = {"once": True}
        elif self.trigger == "processingTime":
            trigger = {"processingTime": "0 seconds" if self.source == "rate" else "1 second"}
        folders = ("in", "other") if self.source == "two_folders" else ("topic",) if self.source == "topic" else ("in",)
        conf = {"spark.misa.state.placement": self.placement}
        if self.placement == "executors":  # one state host: the test session's two task slots hold it and the tasks
            conf["spark.misa.state.processes"] = "1"
        kafka = None
        if self.source == "kafka":
            folders = ()
            kafka = KafkaInputs(self.bootstrap, {name: self.kafka_partitions for name in self._topics()})
        return Scenario(
            f"seed {self.seed}",
            self.build,
            self.output_mode,
            self.rounds,
            trigger,
            folders=folders,
            conf=conf,
            kafka=kafka,
        )

    def _topics(self) -> tuple[str, ...]:
        """A Kafka case's topics: one per stream (``in``, and ``other`` for a second stream)."""
        return _streams(self.stateful, self.plan, self.split != "none")

    # ------------------------------------------------------------------ the query, in Spark's API
    def build(self, spark: SparkSession, inputs: Path) -> DataFrame:
        """The query over the inputs under ``inputs``."""
        query, key = self._stateful(spark, inputs)
        return query.where(F.col(key) >= 1) if self.key_filter == "above" else query

    def _stateful(self, spark: SparkSession, inputs: Path) -> tuple[DataFrame, str]:
        """The query up to its stateful step, and the name of its key column in the step's output."""
        if self.stateful in ("join", "outer_join"):
            return self._join(spark, inputs), "lk"
        events = self._planned(spark, inputs)
        key = self._key(events)
        name = {"expression": "k3", "struct_field": "a"}.get(self.key, "my k" if "my k" in events.columns else "k")
        if self.stateful in ("dedup", "dedup_time", "dedup_within"):
            return self._deduplicated(events, key), "key" if self.key != "column" else name
        grouped = {
            "tumbling": lambda: events.groupBy(F.window("t", f"{self.window_s} seconds"), key),
            "sliding": lambda: events.groupBy(
                F.window("t", f"{self.window_s} seconds", f"{max(1, self.window_s // 2)} seconds"), key
            ),
            "global": lambda: events.groupBy(key),
            "session": lambda: events.groupBy(F.session_window("t", f"{self.window_s} seconds"), key),
        }[self.stateful]()
        return grouped.agg(*self._aggregates(), *self._kafka_aggregates()), name

    def _events(self, spark: SparkSession, inputs: Path, folder: str = "in") -> DataFrame:
        """The source's rows with columns ``t, k, v, s, st`` (and ``side`` when split), watermarked."""
        return self._read(spark, inputs, folder).withWatermark("t", f"{self.delay_s} seconds")

    def _read(self, spark: SparkSession, inputs: Path, folder: str = "in", other: bool = False) -> DataFrame:
        """One ``readStream`` of the source; ``other``: through other projections (columns in another order, the
        event time computed again, the same values)."""
        schema = SCHEMA + ", side int" if self.split != "none" else SCHEMA
        if self.source == "kafka":
            rows = self._kafka(spark, inputs, folder, schema)
        elif self.source == "topic":
            spark.dataSource.register(TopicSource)
            reader = spark.readStream.format("misa-test-topic").schema(schema).option("maxRecordsPerBatch", 3)
            rows = reader.load(str(inputs / "topic"))
        elif self.source == "rate":
            rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 3).load()
            late = F.when(F.col("value") % 4 == 3, F.expr("INTERVAL 7 SECONDS")).otherwise(F.expr("INTERVAL 0 SECONDS"))
            columns = [
                (F.col("timestamp") + F.expr("INTERVAL 15 SECONDS") - late).alias("t"),
                (F.col("value") % 3).cast("int").alias("k"),
                F.col("value").alias("v"),
                F.concat(F.lit("s"), (F.col("value") % 2).cast("string")).alias("s"),
                F.struct((F.col("value") % 2).cast("int").alias("a"), F.lit("x").alias("b")).alias("st"),
            ]
            if self.split != "none":  # a seventh of the rows in neither branch
                side = F.when(F.col("value") % 7 == 6, 2).otherwise(F.col("value") % 2)
                columns.append(side.cast("int").alias("side"))
            rows = rate.select(*columns)
        else:
            path = {"glob": inputs / folder / "*.json", "subfolders": inputs / folder}.get(self.source, inputs / folder)
            rows = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(path))
        if other:  # every column read (a partition column too), in reverse order
            event_time = F.timestamp_micros(F.unix_micros("t")).alias("t")
            return rows.select(*[event_time if name == "t" else F.col(f"`{name}`") for name in reversed(rows.columns)])
        return rows

    def _kafka(self, spark: SparkSession, inputs: Path, folder: str, schema: str) -> DataFrame:
        """The topic of stream ``folder`` read as drawn, its value decoded with ``from_json``, with the columns of a
        folder's rows (``t`` the value's or Kafka's timestamp) and the Kafka columns kept (``kafka_partition``,
        ``kafka_offset``, ``kafka_timestamp``, ``kafka_topic``: the topic's name without the engine's hash)."""
        topic = topic_name(inputs, folder)
        reader = spark.readStream.format("kafka").option("kafka.bootstrap.servers", self.bootstrap)
        reader = reader.option("subscribe", topic)
        starts = dict(self.kafka_start).get(folder)
        if starts is None:
            reader = reader.option("startingOffsets", "earliest")
        else:
            offsets = {str(partition): offset for partition, offset in enumerate(starts)}
            reader = reader.option("startingOffsets", json.dumps({topic: offsets}))
        if self.kafka_limit == "maxOffsetsPerTrigger":
            reader = reader.option("maxOffsetsPerTrigger", self.kafka_limit_n)
        elif self.kafka_limit == "minOffsetsPerTrigger":
            reader = reader.option("minOffsetsPerTrigger", self.kafka_limit_n)
            reader = reader.option("maxTriggerDelay", KAFKA_MAX_TRIGGER_DELAY)
        raw = reader.load()
        value = F.from_json(F.col("value").cast("string"), schema).alias("j")
        decoded = raw.select(value, "partition", "offset", "timestamp", "topic")
        names = [name.split()[0] for name in schema.split(", ")]
        columns = [
            F.col("timestamp").alias("t") if n == "t" and self.kafka_time == "timestamp" else F.col(f"j.{n}")
            for n in names
        ]
        kept = {
            "partition": F.col("partition").alias("kafka_partition"),
            "offset": F.col("offset").alias("kafka_offset"),
            "timestamp": F.col("timestamp").alias("kafka_timestamp"),
            "topic": F.regexp_replace("topic", "-[0-9a-f]{10}$", "").alias("kafka_topic"),
        }
        return decoded.select(*columns, *[kept[name] for name in self.kafka_columns])

    def _kafka_aggregates(self) -> list[Column]:
        """A window's or a group's aggregates over the Kafka columns kept."""
        chosen = {
            "partition": F.max("kafka_partition").alias("max_partition"),
            "offset": F.sum("kafka_offset").alias("offsets"),
            "timestamp": F.max("kafka_timestamp").alias("last_record"),
            "topic": F.min("kafka_topic").alias("topic"),
        }
        return [chosen[name] for name in self.kafka_columns]

    def _branches(self, spark: SparkSession, inputs: Path) -> tuple[DataFrame, DataFrame]:
        """One stream split by filters into two branches, each watermarked (:data:`SPLIT_FILTERS`): above
        ``withWatermark``, both branches of one read read one node; below it, each branch has its own."""
        first_filter, second_filter = SPLIT_FILTERS[self.split_on]
        first = self._read(spark, inputs)
        second = first
        if self.split_from != "one_read":
            second = self._read(spark, inputs, other=self.split_from == "two_reads_other_projection")
        if self.split_at == "above":
            marked = first.withWatermark("t", f"{self.delay_s} seconds")
            other = marked if second is first else second.withWatermark("t", f"{self.delay_s} seconds")
            return marked.where(first_filter), other.where(second_filter)
        return (
            first.where(first_filter).withWatermark("t", f"{self.delay_s} seconds"),
            second.where(second_filter).withWatermark("t", f"{self.delay_s} seconds"),
        )

    def _planned(self, spark: SparkSession, inputs: Path) -> DataFrame:
        """The source's rows through the plan below the stateful step (split: the union of the two branches)."""
        if self.split == "union":
            first, second = self._branches(spark, inputs)
            events = first.unionByName(second)
        else:
            events = self._events(spark, inputs)
        if self.plan == "renamed":
            return events.withColumnRenamed("k", "my k").withColumnRenamed("v", "value")
        if self.plan == "filter":
            return events.where(F.col("v") % 3 != 1)
        if self.plan == "static":
            names = spark.createDataFrame([(0, "zero"), (1, "one"), (2, "two")], "k int, name string")
            return events.join(names, "k")
        if self.plan == "union":
            other = self._events(spark, inputs, "other")
            return events.unionByName(other)
        return events

    def _key(self, events: DataFrame) -> Column:
        column = "my k" if "my k" in events.columns else "k"
        if self.key == "expression":
            return (F.col(column) % 3).alias("k3")
        if self.key == "struct_field":
            return F.col("st.a").alias("a")
        return F.col(column)

    def _aggregates(self) -> list[Column]:
        value = "value" if self.plan == "renamed" else "v"
        chosen = {
            "count": [F.count("*").alias("n")],
            "sum": [F.count("*").alias("n"), F.sum(value).alias("total")],
            "avg": [F.avg(value).alias("mean")],
            "stddev": [F.stddev(value).alias("sd")],
            "over_aggregates": [(F.sum(value) * 2).alias("twice"), (F.max(value) - F.min(value)).alias("spread")],
        }
        return chosen[self.aggregate]

    def _deduplicated(self, events: DataFrame, key: Column) -> DataFrame:
        keyed = events.withColumn("key", key) if self.key != "column" else events
        column = "key" if self.key != "column" else ("my k" if "my k" in events.columns else "k")
        if self.stateful == "dedup_time":
            return keyed.dropDuplicates([column, "t"])
        if self.stateful == "dedup_within":
            return keyed.dropDuplicatesWithinWatermark([column])
        return keyed.dropDuplicates([column])

    def _join(self, spark: SparkSession, inputs: Path) -> DataFrame:
        if self.split == "join":  # one stream's two branches
            first, second = self._branches(spark, inputs)
        else:
            first, second = self._events(spark, inputs), self._events(spark, inputs, "other")
        kept = [f"kafka_{name}" for name in self.kafka_columns]
        left = first.select(F.col("k").alias("lk"), F.col("t").alias("lt"), "v", *kept)
        if self.key_filter == "one_side":
            left = left.where(F.col("lk") >= 1)
        right = second.select(
            F.col("k").alias("rk"), F.col("t").alias("rt"), "s", *[F.col(c).alias(f"r{c}") for c in kept]
        )
        bound = f"interval {self.window_s} seconds"
        condition = F.expr(f"lk = rk AND rt >= lt - {bound} AND rt <= lt + {bound}")
        return left.join(right, condition, "inner" if self.stateful == "join" else "left_outer")


def random_deployment(seed: int, split_only: bool = False, kafka_only: bool = False) -> Deployment:
    """The deployment of ``seed``; ``split_only``: one stream split by filters, whatever :func:`drawn_split` draws
    without it (a seed drawn split without it is the same case with it); ``kafka_only``: on Kafka, whatever
    :func:`drawn_kafka` draws without it (likewise)."""
    rng = random.Random(seed)
    kafka = random.Random(f"kafka-{seed}")
    on_kafka = kafka.random() < KAFKA_SHARE or kafka_only
    stateful = rng.choice(STATEFUL)
    split = drawn_split(seed, stateful, split_only)
    stateful = split.pop("stateful", stateful)
    two = stateful in ("join", "outer_join")
    source = rng.choice(SOURCES if not two else ("two_folders",))
    plan = "as_read" if two else rng.choice(PLANS)
    if split:  # one source, split; a union of two streams is not among its plans
        source = split.pop("source")
        plan = "as_read" if plan == "union" else plan
    elif plan == "union":
        source = "two_folders"
    elif source == "two_folders" and not two:
        source = "folder"
    if on_kafka:  # the topics replace the source drawn: one stream, or two (a join of two streams, a union)
        source = "kafka"
    trigger = "processingTime" if source == "rate" else rng.choices(TRIGGERS, weights=(6, 2, 2))[0]
    delay_s, window_s = rng.choice((0, 2, 5)), rng.choice((4, 10))
    rounds = _rounds(rng, source, plan, two and not split, trigger, delay_s)
    if split:
        rounds = _with_sides(seed, rounds)
    drawn: dict[str, Any] = {}
    if on_kafka:
        rounds, drawn = drawn_kafka(kafka, rounds, trigger, _streams(stateful, plan, bool(split)))
    key_filter = rng.choices(KEY_FILTERS if two else KEY_FILTERS[:2], weights=(6, 2, 2) if two else (6, 2))[0]
    deployment = Deployment(
        seed,
        source,
        plan,
        stateful,
        rng.choice(KEYS),
        rng.choice(AGGREGATES),
        trigger,
        _output_mode(rng, stateful),
        delay_s,
        window_s,
        rounds,
        key_filter,
        drawn_placement(seed),
        **split,
        **drawn,
    )
    return _dedup_key_in_one_partition(deployment)


def _dedup_key_in_one_partition(deployment: Deployment) -> Deployment:
    """``deployment``, with each deduplication key's records in one partition of its topic when the key is not
    the record's key (``k % 3``, a struct's field). A deduplication keeps whichever of a key's rows its task reads
    first, and Spark reads a batch's partitions in no fixed order (seeds 20039, 20069, 20086: Spark itself kept
    another row on a second run), so rows of one key spread over partitions have no one answer to compare."""
    d = deployment
    if d.source != "kafka" or not d.stateful.startswith("dedup") or d.key == "column" or d.kafka_partitions < 2:
        return d

    def routed(files: tuple[tuple[str, Rows], ...]) -> tuple[tuple[str, Rows], ...]:
        return tuple(
            (path, tuple({**row, "_partition": kafka_partition(d, row)} for row in rows)) for path, rows in files
        )

    rounds = tuple(replace(r, files=routed(r.files), later=routed(r.later)) for r in d.rounds)
    at_start = _partitions_at_start(rounds)
    starts = tuple(  # an offset past a partition's records at start: its records at start
        (topic, tuple(o if o < 0 else min(o, at_start.count((topic, p))) for p, o in enumerate(offsets)))
        for topic, offsets in d.kafka_start
    )
    return replace(d, rounds=rounds, kafka_start=starts)


def kafka_partition(deployment: Deployment, row: dict[str, Any]) -> int:
    """The partition of ``row``'s record: by its key ``k`` (a null key's the last), or for a deduplication on
    another key, by that key (:func:`_dedup_key_in_one_partition`)."""
    d = deployment
    key = row["k"]
    if d.stateful.startswith("dedup") and d.key != "column":
        key = row["st"]["a"] if d.key == "struct_field" else None if key is None else key % 3
    return d.kafka_partitions - 1 if key is None else key % d.kafka_partitions


def _partitions_at_start(rounds: tuple[Round, ...]) -> list[tuple[str, int]]:
    """Each record written before the first run: its topic and partition."""
    return [(path.split("/")[1], row["_partition"]) for path, rows in rounds[0].files for row in rows]


def drawn_split(seed: int, stateful: str, only: bool = False) -> dict[str, str]:
    """The split of case ``seed`` (Deployment's ``split*`` fields, the ``source`` and the ``stateful`` step), or
    nothing: a fifth of the cases, every case when ``only``. Drawn from a generator of its own, the same draws
    either way, so a seed keeps its other draws. A join split runs a join (the seed's, else an inner join three
    times in four), a union split the seed's step (else one of the others)."""
    rng = random.Random(f"split-{seed}")
    drawn = rng.random() < SPLIT_SHARE
    kind = rng.choice(SPLITS[1:])
    joined = rng.choices(("join", "outer_join"), weights=(3, 1))[0]
    unjoined = rng.choice(STATEFUL[:-2])
    shape = {
        "split": kind,
        "split_on": rng.choice(SPLIT_ON),
        "split_at": rng.choice(SPLIT_AT),
        "split_from": rng.choice(SPLIT_FROM),
        "source": rng.choices(SPLIT_SOURCES, weights=(3, 1, 1, 3, 1))[0],
    }
    if not (drawn or only):
        return {}
    if kind == "join" and stateful not in ("join", "outer_join"):
        stateful = joined
    elif kind == "union" and stateful in ("join", "outer_join"):
        stateful = unjoined
    return {**shape, "stateful": stateful}


def drawn_kafka(
    rng: random.Random, rounds: tuple[Round, ...], trigger: str, topics: tuple[str, ...]
) -> tuple[tuple[Round, ...], dict[str, Any]]:
    """A Kafka case's draws (Deployment's ``kafka_*`` fields) from its own generator ``rng``, and its rounds' rows
    with their partition (``_partition``: the key's, a null key's the last; keys skewed: most rows' key 0)."""
    partitions = rng.randint(1, 4)
    skew = rng.choice(KAFKA_SKEW)
    start = rng.choice(KAFKA_START)
    limits = KAFKA_LIMITS if trigger == "processingTime" else KAFKA_LIMITS[:2]  # a minimum: under processing time
    limit = rng.choices(limits, weights=(1, 1, 2)[: len(limits)])[0]
    limit_n = rng.randint(2, 12) if limit == "maxOffsetsPerTrigger" else rng.randint(2, 6)
    event_time = rng.choice(KAFKA_TIME)
    columns = tuple(name for name in KAFKA_COLUMNS if rng.random() < 0.4)

    def partitioned(files: tuple[tuple[str, Rows], ...]) -> tuple[tuple[str, Rows], ...]:
        out = []
        for path, rows in files:
            keyed = []
            for row in rows:
                k = 0 if skew == "skewed" and row["k"] is not None and rng.random() < 0.6 else row["k"]
                keyed.append({**row, "k": k, "_partition": partitions - 1 if k is None else k % partitions})
            out.append((path, tuple(keyed)))
        return tuple(out)

    rounds = tuple(replace(r, files=partitioned(r.files), later=partitioned(r.later)) for r in rounds)
    starts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    if start == "json":  # each partition: earliest, latest, or an offset up to the records there at start
        at_start = _partitions_at_start(rounds)
        starts = tuple(
            (topic, tuple(_start_offset(rng, at_start.count((topic, p))) for p in range(partitions)))
            for topic in topics
        )
    drawn = {
        "kafka_partitions": partitions,
        "kafka_skew": skew,
        "kafka_start": starts,
        "kafka_limit": limit,
        "kafka_limit_n": limit_n if limit != "none" else 0,
        "kafka_time": event_time,
        "kafka_columns": columns,
    }
    return rounds, drawn


def _start_offset(rng: random.Random, records: int) -> int:
    """A partition's starting offset in JSON: earliest (-2), latest (-1), or one of its ``records`` at start."""
    return rng.choice((-2, -1, rng.randint(0, records), rng.randint(0, records)))


def _with_sides(seed: int, rounds: tuple[Round, ...]) -> tuple[Round, ...]:
    """The rounds' rows with a ``side`` field (0 or 1, a tenth 2: no branch's), drawn from a generator of their own
    (the rows keep their other fields)."""
    rng = random.Random(f"side-{seed}")

    def sided(files: tuple[tuple[str, Rows], ...]) -> tuple[tuple[str, Rows], ...]:
        return tuple(
            (path, tuple({**row, "side": rng.choices((0, 1, 2), weights=(9, 9, 2))[0]} for row in rows))
            for path, rows in files
        )

    return tuple(replace(r, files=sided(r.files), later=sided(r.later)) for r in rounds)


def _streams(stateful: str, plan: str, split: bool) -> tuple[str, ...]:
    """A case's streams: a join of two streams (not one split) and a union of two read ``in`` and ``other``."""
    return ("in", "other") if (stateful in ("join", "outer_join") and not split) or plan == "union" else ("in",)


def _output_mode(rng: random.Random, stateful: str) -> str:
    """Mostly a mode Spark allows for the step (so most cases run), sometimes any (Spark and misa must refuse)."""
    allowed = {"global": ("update", "complete"), "session": ("append", "complete")}.get(stateful, MODES)
    if stateful.startswith(("dedup", "join", "outer")):
        allowed = ("append", "update")
    return rng.choice(MODES if rng.random() < 0.1 else allowed)


def _rounds(rng: random.Random, source: str, plan: str, two: bool, trigger: str, delay_s: int) -> tuple[Round, ...]:
    """One to three runs of input: files (or a topic's records) with event times moving forward and some rows later
    than the watermark delay."""
    if source == "rate":
        return tuple(Round(batches=rng.randint(2, 5)) for _ in range(rng.randint(1, 2)))
    clock = 100
    folders = ("in", "other") if two or plan == "union" else ("in",)
    rounds, written = [], 0
    for _ in range(rng.randint(1, 3)):
        files = []
        for _ in range(rng.randint(1, 3)):
            folder = rng.choice(folders)
            rows, clock = _rows(rng, clock, delay_s), clock + rng.randint(1, 12)
            files.append((_path(source, folder, written), rows))
            written += 1
        if trigger == "processingTime" and not (source == "subfolders" and not rounds):
            rounds.append(Round(later=tuple(files)))
        elif trigger == "processingTime":  # a partition folder that appears while running fails Spark: one at start
            rounds.append(Round(files=tuple(files[:1]), later=tuple(files[1:])))
        else:
            rounds.append(Round(files=tuple(files)))
    return tuple(rounds)


def _path(source: str, folder: str, index: int) -> str:
    if source == "topic":
        return f"topic/{index:05d}.jsonl"
    if source == "kafka":  # produced to the engine's topic of the stream
        return f"kafka/{folder}/{index:05d}"
    if source == "subfolders":
        return f"{folder}/day={index % 2}/part-{index:05d}.json"
    return f"{folder}/part-{index:05d}.json"


def _rows(rng: random.Random, clock: int, delay_s: int) -> Rows:
    """One to five records about ``clock``: most on time, some later than the delay, a null key now and then."""
    rows = []
    for _ in range(rng.randint(1, 5)):
        t = clock + rng.randint(-2, 3) - (delay_s + rng.randint(1, 8) if rng.random() < 0.2 else 0)
        k = None if rng.random() < 0.05 else rng.randint(0, 3)
        v = rng.randint(-5, 20)
        rows.append({"t": t, "k": k, "v": v, "s": f"s{v % 3}", "st": {"a": rng.randint(0, 2), "b": "x"}})
    return tuple(rows)
