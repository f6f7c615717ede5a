"""Random queries as users deploy them, drawn independently of what misa runs: ``misa fuzz --deployments``.

A :class:`Deployment` is drawn from a seed, shape by shape, each shape from the whole of what Spark runs and users
write, not from misa's operators:

* **source**: one folder of JSON files, a glob (``in/*.json``), files in subfolders (``in/day=N/``), the tests'
  Python source with a backlog (Kafka's stand-in, :mod:`jobs.differential.topic_source`), ``rate-micro-batch``,
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
* **where misa keeps the state**: the driver, or (a third of the cases) a state host on the executors.

Each case runs through plain Spark and through misa (:func:`jobs.differential.scenarios.run_scenario`): a query
Spark refuses must be refused by misa at start; one misa refuses must be refused at start with
``UnsupportedQueryError``; every other one must give Spark's batches and rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.differential.cases import drawn_placement
from jobs.differential.scenarios import Round, Rows, Scenario
from jobs.differential.topic_source import TopicSource

SCHEMA = "t timestamp, k int, v bigint, s string, st struct<a:int,b:string>"
SOURCES = ("folder", "glob", "subfolders", "topic", "rate", "two_folders")
PLANS = ("as_read", "renamed", "filter", "static", "union")
STATEFUL = ("tumbling", "sliding", "global", "session", "dedup", "dedup_time", "dedup_within", "join", "outer_join")
KEYS = ("column", "expression", "struct_field")
AGGREGATES = ("count", "sum", "avg", "stddev", "over_aggregates")
TRIGGERS = ("availableNow", "once", "processingTime")
MODES = ("append", "update", "complete")
KEY_FILTERS = ("none", "above", "one_side")


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

    @property
    def tags(self) -> tuple[str, ...]:
        """The shapes drawn, for coverage counts."""
        names = ["source", "plan", "stateful", "key", "aggregate", "key_filter", "trigger", "output_mode", "placement"]
        if self.stateful not in ("tumbling", "sliding", "global", "session"):
            names.remove("aggregate")
        if self.stateful in ("join", "outer_join"):
            names.remove("key")
        return tuple(f"{name}:{getattr(self, name)}" for name in names) + (f"rounds:{len(self.rounds)}",)

    def describe(self) -> str:
        return f"seed {self.seed}: " + " ".join(tag.split(":", 1)[1] for tag in self.tags)

    def scenario(self) -> Scenario:
        trigger: dict[str, Any] = {"availableNow": True}
        if self.trigger == "once":
            trigger = {"once": True}
        elif self.trigger == "processingTime":
            trigger = {"processingTime": "0 seconds" if self.source == "rate" else "1 second"}
        folders = ("in", "other") if self.source == "two_folders" else ("topic",) if self.source == "topic" else ("in",)
        conf = {"spark.misa.state.placement": self.placement}
        if self.placement == "executors":  # one state host: the test session's two task slots hold it and the tasks
            conf["spark.misa.state.processes"] = "1"
        return Scenario(
            f"seed {self.seed}", self.build, self.output_mode, self.rounds, trigger, folders=folders, conf=conf
        )

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
        return grouped.agg(*self._aggregates()), name

    def _events(self, spark: SparkSession, inputs: Path, folder: str = "in") -> DataFrame:
        """The source's rows with columns ``t, k, v, s, st``, watermarked."""
        if self.source == "topic":
            spark.dataSource.register(TopicSource)
            reader = spark.readStream.format("misa-test-topic").schema(SCHEMA).option("maxRecordsPerBatch", 3)
            rows = reader.load(str(inputs / "topic"))
        elif self.source == "rate":
            rate = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 3).load()
            late = F.when(F.col("value") % 4 == 3, F.expr("INTERVAL 7 SECONDS")).otherwise(F.expr("INTERVAL 0 SECONDS"))
            rows = rate.select(
                (F.col("timestamp") + F.expr("INTERVAL 15 SECONDS") - late).alias("t"),
                (F.col("value") % 3).cast("int").alias("k"),
                F.col("value").alias("v"),
                F.concat(F.lit("s"), (F.col("value") % 2).cast("string")).alias("s"),
                F.struct((F.col("value") % 2).cast("int").alias("a"), F.lit("x").alias("b")).alias("st"),
            )
        else:
            path = {"glob": inputs / folder / "*.json", "subfolders": inputs / folder}.get(self.source, inputs / folder)
            rows = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(path))
        return rows.withWatermark("t", f"{self.delay_s} seconds")

    def _planned(self, spark: SparkSession, inputs: Path) -> DataFrame:
        """The source's rows through the plan below the stateful step."""
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
        left = self._events(spark, inputs).select(F.col("k").alias("lk"), F.col("t").alias("lt"), "v")
        if self.key_filter == "one_side":
            left = left.where(F.col("lk") >= 1)
        right = self._events(spark, inputs, "other").select(F.col("k").alias("rk"), F.col("t").alias("rt"), "s")
        bound = f"interval {self.window_s} seconds"
        condition = F.expr(f"lk = rk AND rt >= lt - {bound} AND rt <= lt + {bound}")
        return left.join(right, condition, "inner" if self.stateful == "join" else "left_outer")


def random_deployment(seed: int) -> Deployment:
    """The deployment of ``seed``."""
    rng = random.Random(seed)
    stateful = rng.choice(STATEFUL)
    two = stateful in ("join", "outer_join")
    source = rng.choice(SOURCES if not two else ("two_folders",))
    plan = "as_read" if two else rng.choice(PLANS)
    if plan == "union":
        source = "two_folders"
    elif source == "two_folders" and not two:
        source = "folder"
    trigger = "processingTime" if source == "rate" else rng.choices(TRIGGERS, weights=(6, 2, 2))[0]
    delay_s, window_s = rng.choice((0, 2, 5)), rng.choice((4, 10))
    rounds = _rounds(rng, source, plan, two, trigger, delay_s)
    key_filter = rng.choices(KEY_FILTERS if two else KEY_FILTERS[:2], weights=(6, 2, 2) if two else (6, 2))[0]
    return Deployment(
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
    )


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
