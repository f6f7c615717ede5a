"""The stream-stream join's columnar state (:class:`misa.operators.stream_join.StreamJoin`) against the per-key code it
replaced (:mod:`per_key_stream_join`): random batches of every key type and of rows of many field types, with each
kind of state watermark (an interval condition, the event time as a join key, one side evicting, none), batches
without data between, and a state the per-key code wrote continued by the columnar code."""

from __future__ import annotations

import decimal
import pickle
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pytest
from idle_runs import IdleBatchRun, row_reprs
from key_pools import KEY_TYPES, key_pool
from per_key_stream_join import PerKeyStreamJoin

from misa.operators.stream_join import JoinSide, StreamJoin
from misa.state.keys import JOIN_ROWS, JOIN_TIMER

SECOND = 1_000_000
TS = pa.timestamp("us", tz="UTC")
LEFT = pa.struct(
    [
        ("id", pa.int64()),
        ("t", TS),
        ("amount", pa.float64()),
        ("name", pa.string()),
        ("price", pa.decimal128(10, 2)),
        ("tags", pa.list_(pa.string())),
    ]
)
RIGHT = pa.struct([("rid", pa.int32()), ("rt", TS), ("flag", pa.bool_()), ("payload", pa.binary())])

JOINS: dict[str, Callable[[type, int], StreamJoin]] = {
    "interval": lambda cls, keys: cls(keys, JoinSide("t", 0, ("name",), 0), JoinSide("rt", 2000, (), -10_001)),
    "key_time": lambda cls, keys: cls(keys, JoinSide("t", 0), JoinSide("rt", 1000), key_time=0),
    "left_evicts": lambda cls, keys: cls(keys, JoinSide("t", 500, (), 3000), JoinSide("rt", 0, (), None)),
    "forever": lambda cls, keys: cls(keys, JoinSide(), JoinSide()),
}


def _batch(rng: np.random.Generator, pools: list[tuple[str, list]], key_time: bool, base_us: int, n: int) -> pa.Table:
    """``n`` rows of either side: keys from ``pools`` (nulls among them), event times over 12 s from ``base_us``
    (some late), rows with nulls, NaN and -0.0 in their fields."""
    side = rng.integers(0, 2, n)
    times = base_us + rng.integers(-4, 12, n) * (SECOND // 2)
    picks = [rng.integers(0, len(pool), n) for _, pool in pools]
    columns: dict[str, pa.Array] = {"_side": pa.array(side, pa.int32())}
    for i, ((kind, pool), pick) in enumerate(zip(pools, picks)):
        columns[f"_k{i}"] = pa.array([pool[p] for p in pick], KEY_TYPES[kind])
    if key_time:  # the first key is the event time, a whole second (so that keys repeat)
        columns["_k0"] = pa.array((times // SECOND) * SECOND, TS)
    amounts = [None, float("nan"), -0.0, 0.0, 1.5, -2.25]
    left = [
        {
            "id": int(i),
            "t": None if i % 13 == 6 else int(t),  # a row without event time: stored, never evicted
            "amount": amounts[i % len(amounts)],
            "name": None if i % 9 == 4 else f"n{i % 5}",
            "price": decimal.Decimal(i % 1000) / 100,
            "tags": None if i % 4 == 1 else [f"t{j}" for j in range(i % 3)],
        }
        for i, t in enumerate(times.tolist())
    ]
    right = [
        {
            "rid": i,
            "rt": None if i % 17 == 8 else int(t),
            "flag": [True, False, None][i % 3],
            "payload": None if i % 5 == 0 else bytes([i % 256]),
        }
        for i, t in enumerate(times.tolist())
    ]
    columns["_l"] = pa.array([r if s == 0 else None for r, s in zip(left, side)], LEFT)
    columns["_r"] = pa.array([r if s == 1 else None for r, s in zip(right, side)], RIGHT)
    table = pa.table(columns)
    return table.set_column(table.schema.get_field_index("_l"), "_l", table["_l"].cast(LEFT))


class _Run(IdleBatchRun):
    def batch(self, deltas: pa.Table) -> tuple[list[str], int, int]:
        """The batch's output rows, dropped and late rows (the batch without data outputs nothing)."""
        data, idle = self.step(deltas)
        assert idle.output.num_rows == 0
        return row_reprs(data.output.to_pylist()), data.dropped_rows, data.late_rows

    def state(self) -> tuple[list[bytes], list[str]]:
        """The timers, and every stored row as (record key, time, row values)."""
        timers = [k for k, _ in self.view.scan(JOIN_TIMER, JOIN_TIMER + b"\xff")]
        rows = []
        for key, record in self.view.scan(JOIN_ROWS, JOIN_ROWS + b"\xff"):
            if record[:1] == b"\x80":
                stored = [(t, list(row)) for t, row in pickle.loads(record)]
            else:
                side = 0 if key[len(JOIN_ROWS) : len(JOIN_ROWS) + 1] == b"L" else 1
                table, _ = self.operator._decode(side, [record])
                stored = [(r.pop("_t"), list(r.values())) for r in table.to_pylist()]
            rows += [repr((key, t, values)) for t, values in stored]
        return timers, sorted(rows)


def _same_runs(tmp_path: Path, join: str, keys: list[str], seed: int, switch_at: int = 0) -> None:
    """Ten random batches through the columnar join and the per-key one: the same rows, counts and state each batch.
    With ``switch_at``, the first run is the per-key join up to that batch, then the columnar one on its state."""
    rng = np.random.default_rng(seed)
    pools = [(kind.split("_")[0], key_pool(kind.split("_")[0], rng, 8)) for kind in keys]
    run = _Run(tmp_path / "run", JOINS[join](PerKeyStreamJoin if switch_at else StreamJoin, len(keys)))
    per_key = _Run(tmp_path / "per-key", JOINS[join](PerKeyStreamJoin, len(keys)), memory_tier=False)
    try:
        matched = 0
        for n in range(10):
            if switch_at and n == switch_at:  # both restart (a restart forgets each side's latest event time)
                for runner, cls in ((run, StreamJoin), (per_key, PerKeyStreamJoin)):
                    restarted = JOINS[join](cls, len(keys))
                    restarted.restore(runner.operator.metadata())
                    runner.operator = restarted
            deltas = _batch(rng, pools, join == "key_time", n * 3 * SECOND, int(rng.integers(0, 50)))
            got, expected = run.batch(deltas), per_key.batch(deltas)
            assert got == expected, f"batch {n}"
            assert run.state() == per_key.state(), f"state after batch {n}"
            matched += len(got[0])
        assert matched > 0
    finally:
        run.close()
        per_key.close()


KEYS = [["long"], ["string"], ["double"], ["timestamp"], ["string", "long_2"]]
DEFAULT_CASES = {("interval", 0), ("key_time", 4), ("left_evicts", 2), ("forever", 1)}  # the rest: -m slow


@pytest.mark.parametrize(
    "join,keys",
    [
        pytest.param(join, keys, marks=[] if (join, i) in DEFAULT_CASES else [pytest.mark.slow])
        for join in sorted(JOINS)
        for i, keys in enumerate(KEYS)
    ],
)
def test_the_columnar_join_gives_the_per_key_codes_rows_and_state_for_every_key_type(tmp_path, join, keys):
    if join == "key_time":  # the first key is the event time
        keys = ["timestamp", *keys[1:]]
    _same_runs(tmp_path, join, keys, seed=len(join) * 11 + len(keys) + len(keys[0]))


@pytest.mark.parametrize(
    "join", [pytest.param(j, marks=[] if j in ("interval", "key_time") else [pytest.mark.slow]) for j in sorted(JOINS)]
)
def test_a_state_the_per_key_code_wrote_goes_on_with_the_columnar_code(tmp_path, join):
    _same_runs(tmp_path, join, ["timestamp", "string"], seed=3, switch_at=4)
