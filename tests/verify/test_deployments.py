"""The generator of deployments (verify/differential/deployments.py) draws every shape users deploy, including shapes
misa refuses; a fixed-seed slice runs against plain Spark here (`misa fuzz --deployments` runs more). Among the
shapes, one stream split by filters into a join's sides or a union's branches (issue 61), which the generator did
not draw before: `misa fuzz --deployments --split-only` draws only those."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.captured import convert_exception

from verify.differential import deployments as d
from verify.differential.runner import is_query_refusal
from verify.differential.scenarios import judge, run_scenario


def test_the_generator_draws_every_shape_within_200_seeds():
    drawn = Counter(tag for seed in range(200) for tag in d.random_deployment(seed).tags)
    shapes = {
        "source": d.SOURCES,
        "plan": d.PLANS,
        "stateful": d.STATEFUL,
        "key": d.KEYS,
        "aggregate": d.AGGREGATES,
        "trigger": d.TRIGGERS,
        "output_mode": d.MODES,
        "placement": ("driver", "executors"),
        "split": d.SPLITS,
        "split_on": d.SPLIT_ON,
        "split_at": d.SPLIT_AT,
        "split_from": d.SPLIT_FROM,
    }
    missing = [f"{name}:{value}" for name, values in shapes.items() for value in values if not drawn[f"{name}:{value}"]]
    assert not missing, f"never drawn: {missing}"
    assert drawn["rounds:1"] and drawn["rounds:3"]


def test_a_seed_draws_the_same_deployment():
    assert d.random_deployment(7) == d.random_deployment(7)
    assert d.random_deployment(7) != d.random_deployment(8)
    assert d.random_deployment(7, split_only=True) == d.random_deployment(7, split_only=True)


SPLIT_SEEDS = range(200)


def test_split_only_draws_every_split_shape_and_its_combinations_within_200_seeds():
    cases = [d.random_deployment(seed, split_only=True) for seed in SPLIT_SEEDS]
    assert all(c.split != "none" for c in cases)
    drawn = Counter(tag for c in cases for tag in c.tags)
    shapes = {
        "split": d.SPLITS[1:],
        "split_on": d.SPLIT_ON,
        "split_at": d.SPLIT_AT,
        "split_from": d.SPLIT_FROM,
        "source": d.SPLIT_SOURCES,
        "stateful": d.STATEFUL,
        "trigger": d.TRIGGERS,
        "placement": ("driver", "executors"),
    }
    missing = [f"{name}:{value}" for name, values in shapes.items() for value in values if not drawn[f"{name}:{value}"]]
    assert not missing, f"never drawn: {missing}"
    pairs = Counter((c.split, c.split_on, c.split_at) for c in cases) + Counter((c.split, c.split_from) for c in cases)
    wanted = [(s, on, at) for s in d.SPLITS[1:] for on in d.SPLIT_ON for at in d.SPLIT_AT]
    wanted += [(s, f) for s in d.SPLITS[1:] for f in d.SPLIT_FROM]
    assert not [w for w in wanted if not pairs[w]], "combinations never drawn"
    assert {c.source for c in cases} <= {*d.SPLIT_SOURCES, "kafka"}  # one source, read once or twice
    assert all((c.split == "join") == (c.stateful in ("join", "outer_join")) for c in cases)


def test_a_seed_split_without_split_only_is_the_same_case_with_it_and_the_others_keep_their_draws():
    cases = {seed: d.random_deployment(seed) for seed in range(500)}
    split = [seed for seed, c in cases.items() if c.split != "none"]
    assert 60 <= len(split) <= 140, f"{len(split)} of 500 split"  # a fifth
    assert all(cases[seed] == d.random_deployment(seed, split_only=True) for seed in split)
    for c in cases.values():
        if c.split == "none":
            assert not c.split_on and all(
                "side" not in row for r in c.rounds for _, rows in r.files + r.later for row in rows
            )


# Python's reading of each branch's filter (d.SPLIT_FILTERS) over a generated row; `t` in seconds, and a minute's
# seconds have the parity of `t`.
IN_BRANCH = {
    "key": (lambda r: r["k"] is not None and r["k"] >= 1, lambda r: r["k"] is not None and r["k"] <= 2),
    "side": (lambda r: r["side"] == 0, lambda r: r["side"] == 1),
    "value": (lambda r: r["v"] < 12, lambda r: r["v"] >= 3),
    "time": (lambda r: r["t"] % 2 == 0, lambda r: r["t"] % 2 == 1),
}


def test_the_rows_of_split_cases_reach_both_branches():
    """The generated rows carry the split's column, so that both branches get rows: in nine cases in ten of files or
    a topic, each branch takes a row; a tenth of the rows have side 2 (no branch's)."""
    both, cases, sides = 0, 0, Counter()
    for seed in range(200):
        c = d.random_deployment(seed, split_only=True)
        rows = [row for r in c.rounds for _, rs in r.files + r.later for row in rs]
        if c.source == "rate":
            assert not rows
            continue
        cases += 1
        sides.update(row["side"] for row in rows)
        first, second = IN_BRANCH[c.split_on]
        both += any(map(first, rows)) and any(map(second, rows))
    assert both >= 0.9 * cases, f"{both} of {cases} cases give rows to both branches"
    assert sides[0] > 4 * sides[2] and sides[1] > 4 * sides[2] > 0


# Seeds of the slice: a Python source with a backlog under a filter (a sliding window) and two streams unioned
# (session windows, restarts); each runs through both engines (the first with -m slow: the suite's time).
SLICE = (pytest.param(326, marks=pytest.mark.slow), pytest.param(3423, marks=pytest.mark.slow))  # the suite's time


@pytest.mark.parametrize("seed", SLICE)
def test_a_fixed_seed_slice_gives_sparks_rows_or_a_refusal_at_start(spark, tmp_path: Path, seed: int):
    deployment = d.random_deployment(seed)
    outcome = run_scenario(spark, deployment.scenario(), tmp_path)
    assert outcome.mismatch is None, f"{deployment.describe()}: {outcome.mismatch}"


# Split seeds (`--split-only`), each one run of a folder through availableNow: the shape (a self-join of one
# read's sides split on the side field above its withWatermark), and (-m slow) a union of one read's branches split
# on the value above its withWatermark (deduplicated), a union of two reads' branches, the second read through other
# projections, split on the side below each withWatermark (renamed, deduplicated), a self-join split on the event
# time above the watermark, and unions split on the event time above the watermark before a deduplication (one read)
# and a session window (two reads), each refused before issue 63's item 6.
# make test's time: all -m slow (tests/verify/test_one_stream_split.py runs split streams against Spark in make test)
SPLIT_SLICE = tuple(pytest.param(seed, marks=pytest.mark.slow) for seed in (1388, 833, 1126, 1045, 61, 107))


@pytest.mark.parametrize("seed", SPLIT_SLICE)
def test_fixed_split_seeds_give_sparks_rows(spark, tmp_path: Path, seed: int):
    deployment = d.random_deployment(seed, split_only=True)
    outcome = run_scenario(spark, deployment.scenario(), tmp_path)
    assert outcome.mismatch is None, f"{deployment.describe()}: {outcome.mismatch}"
    assert outcome.ok and outcome.spark_rows > 0, f"{deployment.describe()}: {outcome}"


# Kafka sources (issue 62): two cases in five, every case with `--kafka-only` (`misa fuzz --deployments --kafka-only`
# runs them on a broker started for the run).
KAFKA_SEEDS = range(200)


def test_kafka_only_draws_every_kafka_option_trigger_and_placement_within_200_seeds():
    cases = [d.random_deployment(seed, kafka_only=True) for seed in KAFKA_SEEDS]
    assert all(c.source == "kafka" for c in cases)
    drawn = Counter(tag for c in cases for tag in c.tags)
    wanted = [f"kafka_partitions:{n}" for n in (1, 2, 3, 4)]
    wanted += [f"kafka_skew:{v}" for v in d.KAFKA_SKEW] + [f"kafka_start:{v}" for v in d.KAFKA_START]
    wanted += [f"kafka_start_offset:{v}" for v in ("earliest", "latest", "n")]
    wanted += [f"kafka_limit:{v}" for v in d.KAFKA_LIMITS] + [f"kafka_time:{v}" for v in d.KAFKA_TIME]
    wanted += [f"kafka_column:{v}" for v in (*d.KAFKA_COLUMNS, "none")]
    wanted += [f"kafka_trigger:{v}" for v in d.TRIGGERS] + ["kafka_placement:driver", "kafka_placement:executors"]
    wanted += [f"stateful:{v}" for v in d.STATEFUL] + [f"plan:{v}" for v in d.PLANS] + ["split:join", "split:union"]
    missing = [tag for tag in wanted if not drawn[tag]]
    assert not missing, f"never drawn: {missing}"
    assert all(c.trigger == "processingTime" for c in cases if c.kafka_limit == "minOffsetsPerTrigger")


def test_a_kafka_seed_keeps_its_draws_with_kafka_only_and_two_cases_in_five_are_on_kafka():
    cases = {seed: d.random_deployment(seed) for seed in range(500)}
    kafka = [seed for seed, c in cases.items() if c.source == "kafka"]
    assert 160 <= len(kafka) <= 240, f"{len(kafka)} of 500 on Kafka"
    assert all(cases[seed] == d.random_deployment(seed, kafka_only=True) for seed in kafka)
    assert d.random_deployment(11, kafka_only=True) == d.random_deployment(11, kafka_only=True)
    for c in cases.values():
        rows = [row for r in c.rounds for _, rs in r.files + r.later for row in rs]
        if c.source != "kafka":
            assert not c.kafka_partitions and all("_partition" not in row for row in rows)
        else:  # each record in a partition of its topic, by its key (a deduplication's: by the key it drops on)
            assert all(row["_partition"] == d.kafka_partition(c, row) for row in rows)
            assert all(0 <= row["_partition"] < c.kafka_partitions for row in rows)
            if not c.stateful.startswith("dedup") or c.key == "column":
                assert all(row["_partition"] == row["k"] % c.kafka_partitions for row in rows if row["k"] is not None)


def test_kafka_starting_offsets_name_every_partition_of_every_topic_within_its_records_at_start():
    for seed in KAFKA_SEEDS:
        c = d.random_deployment(seed, kafka_only=True)
        if not c.kafka_start:
            continue
        two = (c.stateful in ("join", "outer_join") and c.split == "none") or c.plan == "union"
        topics = ("in", "other") if two else ("in",)
        assert [topic for topic, _ in c.kafka_start] == list(topics)
        for topic, offsets in c.kafka_start:
            assert len(offsets) == c.kafka_partitions
            for partition, offset in enumerate(offsets):
                at_start = sum(
                    1
                    for path, rows in c.rounds[0].files
                    if path.split("/")[1] == topic
                    for row in rows
                    if row["_partition"] == partition
                )
                assert offset in (-2, -1) or 0 <= offset <= at_start


def test_a_kafka_case_needs_the_broker_and_names_its_topics():
    c = d.random_deployment(11, kafka_only=True)
    with pytest.raises(ValueError, match="bootstrap"):
        c.scenario()
    scenario = c.scenario("127.0.0.1:9")
    assert scenario.kafka is not None and set(scenario.kafka.topics.values()) == {c.kafka_partitions}
    assert all(path.startswith("kafka/") for r in scenario.rounds for path, _ in r.files + r.later)


# Kafka seeds (`--kafka-only`), each on topics of the test session's broker: a tumbling window's average in complete
# output over one partition read from an offset under maxOffsetsPerTrigger, the event time Kafka's timestamp and the
# topic kept as an aggregate; and (-m slow) a deduplication joined with a static table over a topic of 4 partitions,
# skewed keys, Kafka's partition, timestamp and topic kept as columns; a sliding window with the topic's name as an
# aggregate (min of a string; refused at start before issue 63's item 5).
KAFKA_SLICE = (
    pytest.param(20003, marks=pytest.mark.slow),  # the suite's time: make test runs Kafka in test_kafka_*
    pytest.param(20002, marks=pytest.mark.slow),
    pytest.param(20004, marks=pytest.mark.slow),
)


@pytest.mark.parametrize("seed", KAFKA_SLICE)
def test_fixed_kafka_seeds_give_sparks_rows(spark, kafka_broker, tmp_path: Path, seed: int):
    deployment = d.random_deployment(seed, kafka_only=True)
    outcome = run_scenario(spark, deployment.scenario(kafka_broker), tmp_path)
    assert outcome.mismatch is None, f"{deployment.describe()}: {outcome.mismatch}"
    assert outcome.ok and outcome.spark_rows > 0, f"{deployment.describe()}: {outcome}"


def test_a_source_missing_from_the_classpath_is_a_failed_run_not_a_refusal(spark):
    """A Kafka run without the connector's jars got Spark's KAFKA_DATA_SOURCE_NOT_ENABLED on every case, and the
    harness counted each as a query both engines refuse: 12 of 12 cases "refused", none run. A missing source is
    the run's failure; a query Spark cannot analyse stays a refusal. (The first error is the one Spark's own
    lookup raises without the jars, made by Spark's error factory: this session has the jars.)"""
    errors = spark._jvm.org.apache.spark.sql.errors.QueryCompilationErrors
    missing = convert_exception(errors.failedToFindKafkaDataSourceError("kafka"))
    with pytest.raises(AnalysisException) as refused:
        spark.range(1).select("no_such_column")
    assert isinstance(missing, AnalysisException) and not is_query_refusal(missing)
    assert is_query_refusal(refused.value)
    both_failed = judge({}, {"spark": missing, "misa": missing}, {"spark": {}, "misa": {}})
    assert not both_failed.refused and "KAFKA_DATA_SOURCE_NOT_ENABLED" in both_failed.mismatch.what
