"""Random cases for the differential test: a stream of JSON files, a query misa accepts, and misa's settings.

A case's input is a list of *rounds*; a round is a list of files, each file one micro-batch (the source reads
one file per trigger). Each round runs as one ``availableNow`` query, so its files run back to back (Spark runs
no batch without data between them) and the query restarts between rounds. Event times move forward with a
clock; some rows are late by more than the watermark delay and more than one batch's advance, some arrive
out of order within the delay. Key columns take every type misa accepts, with nulls and edge values
(-0.0, NaN, empty strings, extreme integers, dates and timestamps; from_query cases also structs, arrays, decimals
and binary, with values Spark takes as equal inside them).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

KEY_TYPES = ("int", "bigint", "boolean", "double", "float", "string", "date", "timestamp")
# keys misa holds as a text Spark computes (misa.query.key_text); from_query cases draw them (queries.py)
COMPOSITE_KEY_TYPES = (
    "decimal(10,2)",
    "binary",
    "array<double>",
    "struct<a: int, b: double>",
    "struct<s: string, n: struct<x: float, l: array<bigint>>, d: decimal(6,3)>",
)
OPERATORS = ("tumbling", "sliding", "global", "join")
FUNCTIONS = ("sum", "count", "avg", "min", "max")
COMMIT_MODES = ("sync", "async-ckpt", "misa")
PREFETCHING = ("true", "false", "auto")
VALUE_TYPES = ("bigint", "double")


@dataclass(frozen=True)
class Query:
    """What runs: ``operator`` over group (join) keys ``keys`` (name -> Spark type)."""

    operator: str
    keys: dict[str, str]
    functions: tuple[str, ...] = ("sum",)
    value_type: str = "bigint"
    window_s: int = 10
    slide_s: int = 10
    delay_s: int = 0
    output_mode: str = "update"
    interval_s: int = 10  # the join's
    start_s: int = 0  # the window's startTime (from_query cases)
    count_star: bool = False  # count(*) among the aggregates (from_query cases)
    above: bool = False  # a projection and a filter after the stateful operation (from_query cases)
    dynamic_gap: bool = False  # session windows: a gap per row (window_s, or twice it for some keys)
    watermark: bool = True  # withWatermark before the stateful operation (from_query window cases; a join's right)
    join_shape: str = "interval"  # stream_join: the event-time condition (queries.JOIN_SHAPES)
    right_delay_s: int = 0  # stream_join: the right side's withWatermark delay
    residual: bool = False  # stream_join: a predicate of both sides' values in the condition (a.v < b.v)
    right_filter: bool = False  # stream_join: the right side filtered (its rows differ from the left's)
    one_time: bool = False  # stream_join, its select after: the right side's event time dropped (Spark prunes it)
    join_how: str = "inner"  # stream_join: Spark's join type (queries.JOIN_HOWS)
    over_aggregates: bool = False  # expressions over aggregates inside agg (from_query aggregation cases)
    time_filter: bool = False  # a filter on the event time after withWatermark (a join's: its left side's)
    key_expressions: bool = False  # group keys Spark computes: an expression, a struct's field (from_query cases)
    struct_keys: bool = False  # a deduplication's keys as one struct column (from_query cases)
    union: bool = False  # the stream unioned with itself, each with its own withWatermark (from_query cases)
    chain: str = ""  # stateful operations over the first one's output, or below it (queries.CHAINS and after)
    time_key: bool = False  # global: the event time among the group keys, over its withWatermark


@dataclass(frozen=True)
class Settings:
    """misa's configuration for the case."""

    commit_mode: str = "misa"
    prefetching: str = "false"
    shards: int = 2
    cache_max_bytes: int = 1 << 20
    processes: int = 1
    from_query: bool = False  # the query written in Spark's API, run through misa.from_query
    placement: str = "driver"  # spark.misa.state.placement

    def conf(self) -> dict[str, str]:
        return {
            "spark.misa.state.placement": self.placement,
            "spark.misa.state.processes": str(self.processes),
            "spark.misa.commit.mode": self.commit_mode,
            "spark.misa.prefetch.enabled": self.prefetching,
            "spark.misa.state.shards": str(self.shards),
            "spark.misa.cache.maxBytes": str(self.cache_max_bytes),
        }


@dataclass(frozen=True)
class Case:
    seed: int
    query: Query
    settings: Settings
    rounds: tuple[tuple[tuple[dict[str, Any], ...], ...], ...] = field(default=())  # rounds > files > rows

    @property
    def files(self) -> int:
        return sum(len(r) for r in self.rounds)

    @property
    def rows(self) -> int:
        return sum(len(f) for r in self.rounds for f in r)

    def schema(self) -> str:
        """The source's schema (Spark DDL): keys, the event time in ms, the value."""
        columns = [f"`{name}` {t}" for name, t in self.query.keys.items()]
        return ", ".join([*columns, "t bigint", f"v {self.query.value_type}"])

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Case:
        raw = json.loads(text)
        query = raw["query"]
        return cls(
            raw["seed"],
            Query(**{**query, "functions": tuple(query["functions"])}),
            Settings(**raw["settings"]),
            tuple(tuple(tuple(f) for f in r) for r in raw["rounds"]),
        )

    def with_rounds(self, rounds: list[list[list[dict[str, Any]]]]) -> Case:
        return replace(self, rounds=tuple(tuple(tuple(f) for f in r) for r in rounds if any(r)))

    def describe(self) -> str:
        q, s = self.query, self.settings
        shape = {
            "tumbling": f"window {q.window_s}s",
            "sliding": f"window {q.window_s}s slide {q.slide_s}s",
            "global": "no window",
            "join": f"self-join within {q.interval_s}s",
            "stream_join": f"{q.join_how.replace('_', ' ')} join, {q.join_shape} {q.interval_s}s, "
            f"right delay {q.right_delay_s}s"
            + (", a.v < b.v" if q.residual else "")
            + (", right side filtered" if q.right_filter else "")
            + (", the right's event time dropped after" if q.one_time else ""),
            "dedup": "dropDuplicates(keys)",
            "dedup_time": "dropDuplicates(keys + event_time)",
            "dedup_within": "dropDuplicatesWithinWatermark(keys)",
            "session": f"session window gap {q.window_s}s" + (" or per row" if q.dynamic_gap else ""),
            "processor": "SessionFraudProcessor per card" + (", initial state" if q.above else ""),
            "group_state": f"applyInPandasWithState({q.functions[0]})"
            + (", then its calls and most rows per key" if q.chain == "aggregate_above" else ""),
        }[q.operator]
        keys = ", ".join(f"{k} {t}" for k, t in q.keys.items()) or "no keys"
        shape += f" start {q.start_s}s" if q.start_s else ""
        after = q.above and q.operator != "processor"  # a processor case's flag gives it an initial state instead
        shape += (", count(*)" if q.count_star else "") + (", select+where after" if after else "")
        shape += (", expressions over aggregates" if q.over_aggregates else "") + (
            ", a filter on the event time" if q.time_filter else ""
        )
        shape += (", keys computed" if q.key_expressions else "") + (", keys in a struct" if q.struct_keys else "")
        shape += ", a union of two watermarked streams" if q.union else ""
        shape += ", the event time a key" if q.time_key else ""
        shape += f", then {q.chain}" if q.chain else ""
        shape += "" if q.watermark else ", no watermark"
        via = "from_query, " if s.from_query else ""
        return (
            f"seed {self.seed}: {via}{q.operator} ({shape}; keys {keys}; {'/'.join(q.functions)} of {q.value_type}; "
            f"delay {q.delay_s}s; {q.output_mode}) | {s.commit_mode}, prefetching {s.prefetching}, "
            f"{s.shards} shards | {len(self.rounds)} rounds, {self.files} files, {self.rows} rows"
        )


def random_case(seed: int) -> Case:
    """The case of ``seed``: the same seed gives the same case."""
    rng = random.Random(seed)
    operator = rng.choice(OPERATORS)
    key_count = rng.choice((1, 1, 2)) if operator == "join" else rng.choice((0, 1, 1, 2))
    keys = {f"k{i}": rng.choice(KEY_TYPES) for i in range(key_count)}
    window = rng.choice((5, 10, 20))
    query = Query(
        operator=operator,
        keys=keys,
        functions=tuple(rng.sample(FUNCTIONS, rng.randint(1, 3))),
        value_type="bigint" if operator == "join" else rng.choice(VALUE_TYPES),
        window_s=window,
        slide_s=rng.choice((window // 5, window // 2)) if operator == "sliding" else window,
        delay_s=rng.choice((0, 0, 2, 5, 10)),
        output_mode="append" if operator == "join" else rng.choice(("update", "append")),
        interval_s=rng.choice((5, 10, 30)),
    )
    if operator == "global":
        query = replace(query, output_mode="update")
    settings = Settings(
        commit_mode=rng.choice(COMMIT_MODES),
        prefetching=rng.choice(PREFETCHING),
        shards=rng.randint(1, 4),
        cache_max_bytes=rng.choice((4096, 1 << 20)),
    )
    rounds = random_rounds(rng, query)
    settings = replace(settings, processes=rng.choice((1, 2)))  # drawn last: seeds keep their rows
    return Case(seed, query, with_placement(seed, settings), rounds)


def drawn_placement(seed: int) -> str:
    """The state's placement of case ``seed`` (from a generator of its own, so a seed keeps its other draws): a third
    of the cases on the executors."""
    return "executors" if random.Random(f"placement-{seed}").random() < 1 / 3 else "driver"


def with_placement(seed: int, settings: Settings) -> Settings:
    """``settings`` with the state's placement drawn (:func:`drawn_placement`); on the executors in one state host
    (the test session's two task slots hold one host and the query's tasks)."""
    if drawn_placement(seed) == "executors":
        return replace(settings, placement="executors", processes=1)
    return settings


def case_of(query: Query, settings: Settings, seed: int) -> Case:
    """A case of a given query and settings, with random input drawn from ``seed``."""
    return Case(seed, query, settings, random_rounds(random.Random(seed), query))


def random_rounds(rng: random.Random, query: Query) -> tuple:
    clock_ms = rng.randint(0, 20) * 1000
    late_ms = (query.delay_s + rng.choice((2, 12, 25))) * 1000  # beyond the delay and one batch's advance
    rounds = []
    for _ in range(rng.randint(1, 3)):
        files = []
        for _ in range(rng.randint(1, 3)):
            rows = []
            for _ in range(rng.randint(1, 6)):
                roll = rng.random()
                if roll < 0.2:
                    t = max(0, clock_ms - late_ms - rng.randint(0, 3000))  # late
                elif roll < 0.4:
                    t = max(0, clock_ms - rng.randint(0, query.delay_s * 1000 + 999))  # out of order, within delay
                else:
                    t = clock_ms + rng.randint(0, 2000)
                rows.append(_row(rng, query, t))
            files.append(tuple(rows))
            clock_ms += rng.choice((1000, 4000, 9000, 15000))
        rounds.append(tuple(files))
    return tuple(rounds)


def _row(rng: random.Random, query: Query, t_ms: int) -> dict[str, Any]:
    row: dict[str, Any] = {name: _key_value(rng, t) for name, t in query.keys.items()}
    row["t"] = t_ms
    row["v"] = rng.choice(VALUES.get(query.value_type.split("(")[0], VALUES["bigint"]))
    return row


VALUES: dict[str, tuple] = {
    "double": (None, 0.5, -2.25, 3.0, 10.125, -0.0),
    "bigint": (None, 1, 2, -3, 7, 100),
    "decimal": (None, 1.25, -3.5, 0.01, 99999999.99, -0.0),
    "string": (None, "", "a", "b", "zz", "ü€"),
    "boolean": (None, True, False),
}


def _key_value(rng: random.Random, spark_type: str) -> Any:
    """A few distinct values per type (so keys repeat and state is read back), nulls and edge values."""
    if rng.random() < 0.12:
        return None
    choices: dict[str, tuple] = {
        "int": (0, 1, -1, 2147483647, -2147483648),
        "bigint": (0, 5, -7, 9223372036854775807, -9223372036854775808),
        "boolean": (True, False),
        "double": (0.0, -0.0, 1.5, float("nan"), -1e300),
        "float": (0.0, -0.0, 2.5, float("nan")),
        "string": ("", "a", "b", "ü€", "a b"),
        "date": ("1970-01-01", "2024-02-29", "1969-12-31"),
        "timestamp": ("1970-01-01T00:00:00Z", "2024-03-10T02:30:00Z", "2000-01-01T12:00:00.123456Z"),
    }
    return rng.choice(choices.get(spark_type) or COMPOSITE_KEY_VALUES[spark_type])


NAN = float("nan")
COMPOSITE_KEY_VALUES: dict[str, tuple] = {  # values Spark takes as equal among them (-0.0 and 0.0, 1.5 and 1.50)
    "decimal(10,2)": (0.0, -0.0, 1.5, 1.50, -12345678.91, 0.01),
    "binary": ("", "AA==", "AAE=", "/w=="),  # base64, as Spark's JSON reader takes binary
    "array<double>": ([0.0], [-0.0], [NAN], [], [None, 1.5], [1.5, None]),
    "struct<a: int, b: double>": ({"a": 1, "b": 0.0}, {"a": 1, "b": -0.0}, {"a": None, "b": None}, {"a": 2, "b": NAN}),
    "struct<s: string, n: struct<x: float, l: array<bigint>>, d: decimal(6,3)>": (
        {"s": "x", "n": {"x": 0.0, "l": [1, None]}, "d": 1.5},
        {"s": "x", "n": {"x": -0.0, "l": [1, None]}, "d": 1.500},
        {"s": "x", "n": None, "d": None},
        {"s": None, "n": {"x": NAN, "l": []}, "d": -0.001},
        {"s": "y", "n": {"x": None, "l": None}, "d": 0.0},
    ),
    # applyInPandasWithState's keys without floats (queries.GROUP_STATE_KEY_TYPES)
    "struct<a: int, s: string, n: struct<l: array<bigint>>>": (
        {"a": 1, "s": "x", "n": {"l": [1, None]}},
        {"a": 1, "s": "x", "n": None},
        {"a": None, "s": None, "n": {"l": []}},
        {"a": 2, "s": "ü€", "n": {"l": None}},
    ),
    "array<string>": (["a"], [], [None, "b"], ["b", None], ["a", "a"]),
}
