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
* **where misa keeps the state**: the driver, or (a third of the cases) a state host on the executors;
* **one stream split by filters** (issue 61; a fifth of the cases, every case with ``--split-only``): into the two
  sides of a join of two streams or into two branches unioned before the stateful step; the branches' filters on
  the key, on the row's ``side`` field, on the value or on the event time, placed above ``withWatermark`` (one
  node both branches read) or below it (a ``withWatermark`` per branch); both branches from one read, or the second
  from a second ``readStream`` of the same source, with the same projections or other ones
  (:func:`drawn_split`). An event-time filter above the watermark is a shape misa refuses: those cases check the
  refusal at start.

Each case runs through plain Spark and through misa (:func:`jobs.differential.scenarios.run_scenario`): a query
Spark refuses must be refused by misa at start; one misa refuses must be refused at start with
``UnsupportedQueryError``; every other one must give Spark's batches and rows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
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
SPLITS = ("none", "join", "union")
SPLIT_ON = ("key", "side", "value", "time")
SPLIT_AT = ("above", "below")
SPLIT_FROM = ("one_read", "two_reads", "two_reads_other_projection")
SPLIT_SOURCES = ("folder", "glob", "subfolders", "topic", "rate")
SPLIT_SHARE = 0.2  # of the cases, without --split-only
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

    @property
    def tags(self) -> tuple[str, ...]:
        """The shapes drawn, for coverage counts."""
        names = ["source", "plan", "stateful", "key", "aggregate", "key_filter", "trigger", "output_mode", "placement"]
        if self.stateful not in ("tumbling", "sliding", "global", "session"):
            names.remove("aggregate")
        if self.stateful in ("join", "outer_join"):
            names.remove("key")
        names += ["split"] + (["split_on", "split_at", "split_from"] if self.split != "none" else [])
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
        """The source's rows with columns ``t, k, v, s, st`` (and ``side`` when split), watermarked."""
        return self._read(spark, inputs, folder).withWatermark("t", f"{self.delay_s} seconds")

    def _read(self, spark: SparkSession, inputs: Path, folder: str = "in", other: bool = False) -> DataFrame:
        """One ``readStream`` of the source; ``other``: through other projections (columns in another order, the
        event time computed again, the same values)."""
        schema = SCHEMA + ", side int" if self.split != "none" else SCHEMA
        if self.source == "topic":
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
        left = first.select(F.col("k").alias("lk"), F.col("t").alias("lt"), "v")
        if self.key_filter == "one_side":
            left = left.where(F.col("lk") >= 1)
        right = second.select(F.col("k").alias("rk"), F.col("t").alias("rt"), "s")
        bound = f"interval {self.window_s} seconds"
        condition = F.expr(f"lk = rk AND rt >= lt - {bound} AND rt <= lt + {bound}")
        return left.join(right, condition, "inner" if self.stateful == "join" else "left_outer")


def random_deployment(seed: int, split_only: bool = False) -> Deployment:
    """The deployment of ``seed``; ``split_only``: one stream split by filters, whatever :func:`drawn_split` draws
    without it (a seed drawn split without it is the same case with it)."""
    rng = random.Random(seed)
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
    trigger = "processingTime" if source == "rate" else rng.choices(TRIGGERS, weights=(6, 2, 2))[0]
    delay_s, window_s = rng.choice((0, 2, 5)), rng.choice((4, 10))
    rounds = _rounds(rng, source, plan, two and not split, trigger, delay_s)
    if split:
        rounds = _with_sides(seed, rounds)
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
        **split,
    )


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
