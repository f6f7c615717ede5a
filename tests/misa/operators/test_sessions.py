"""Session windows' columnar state (:mod:`misa.operators.session_records`) against the per-key code it replaced
(:mod:`per_key_sessions`): the merge of overlapping sessions, the records' layout, and the operator over random
batches of every key type, in append and complete output, with object aggregates, and continued from records the
per-key code wrote."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from idle_runs import IdleBatchRun, row_reprs
from key_pools import KEY_TYPES, key_pool
from per_key_sessions import PerKeySessionAggregation, Session, _merged

from misa.operators.aggregation import Agg, AggValues
from misa.operators.base import MAX_EVENT, ROWS
from misa.operators.session_records import Sessions, decode, encode, merge_overlapping
from misa.operators.sessions import END, START, SessionAggregation

SECOND = 1_000_000
NUMBERS = [Agg("n", "count", "x"), Agg("total", "sum", "x"), Agg("top", "max", "d"), Agg("mean", "avg", "d")]
OBJECTS = [Agg("names", "collect_list", "s"), Agg("first_x", "first", "x")]


def _deltas(rng: np.random.Generator, groups: dict[str, list], base_us: int, rows: int, objects: bool) -> pa.Table:
    """Spark's partial aggregates per (group, row session) of one batch: sessions of 1 to 5 s, event times over 20 s
    from ``base_us``, a group's sessions apart, overlapping or touching (one's end the next one's start)."""
    starts = base_us + rng.integers(0, 40, rows) * (SECOND // 2) + rng.integers(0, 2, rows)  # some touch exactly
    ends = starts + rng.integers(1, 6, rows) * SECOND
    counts = rng.integers(1, 4, rows)
    sums = rng.integers(-1000, 1000, rows)
    tops = rng.integers(-40, 40, rows) / 4  # quarters: sums of them are exact in any order
    nulls = rng.random(rows) < 0.2
    picks = {name: rng.integers(0, len(pool), rows) for name, pool in groups.items()}
    columns: dict[str, pa.Array] = {
        name: pa.array([pool[i] for i in picks[name]], KEY_TYPES[name.split("_")[0]]) for name, pool in groups.items()
    }
    columns |= {
        START: pa.array(starts),
        END: pa.array(ends),
        ROWS: pa.array(counts),
        MAX_EVENT: pa.array(ends - SECOND),
        "_v0": pa.array(counts),
        "_c0": pa.array(counts),
        "_v1": pa.array(sums),
        "_c1": pa.array(counts),
        "_v2": pa.array(tops, mask=nulls),
        "_c2": pa.array(np.where(nulls, 0, counts)),
        "_v3": pa.array(tops * counts, mask=nulls),
        "_c3": pa.array(np.where(nulls, 0, counts)),
    }
    if objects:
        names = [[f"n{v}" for v in range(int(c))] for c in rng.integers(0, 3, rows)]
        columns |= {
            "_o4": pa.array(names, pa.list_(pa.string())),
            "_c4": pa.array([len(n) for n in names], pa.int64()),
            "_o5": pa.array(sums),
            "_c5": pa.array(counts),
        }
    return pa.table(columns)


class _Run(IdleBatchRun):
    def batch(self, deltas: pa.Table) -> tuple[list[str], int]:
        """The batch's and the batch without data's output rows, and the batch's late rows."""
        data, idle = self.step(deltas)
        return row_reprs(data.output.to_pylist() + idle.output.to_pylist()), data.late_rows


def _operator(cls: type, group_by: list[str], output_mode: str, objects: bool) -> SessionAggregation:
    aggs = NUMBERS + (OBJECTS if objects else [])
    return cls(group_by, aggs, "session", "t", watermark_delay="3s", output_mode=output_mode)


def _same_runs(tmp_path: Path, group_by: list[str], output_mode: str, objects: bool, seed: int, switch_at: int = 0):
    """Eight random batches through the columnar operator and the per-key one: the same rows each batch. With
    ``switch_at``, the first run is the per-key operator up to that batch, then the columnar one on its state."""
    rng = np.random.default_rng(seed)
    groups = {name: key_pool(name.split("_")[0], rng, 12) for name in group_by}
    first = PerKeySessionAggregation if switch_at else SessionAggregation
    run = _Run(tmp_path / "run", _operator(first, group_by, output_mode, objects))
    per_key = _Run(
        tmp_path / "per-key", _operator(PerKeySessionAggregation, group_by, output_mode, objects), memory_tier=False
    )
    try:
        emitted = 0
        for n in range(8):
            if switch_at and n == switch_at:
                columnar = _operator(SessionAggregation, group_by, output_mode, objects)
                columnar.restore(run.operator.metadata())
                run.operator = columnar
            deltas = _deltas(rng, groups, n * 6 * SECOND, int(rng.integers(1, 60)), objects)
            got, expected = run.batch(deltas), per_key.batch(deltas)
            assert got == expected, f"batch {n}"
            emitted += len(got[0])
        assert emitted > 0
    finally:
        run.close()
        per_key.close()


@pytest.mark.parametrize("group_by", [["long"], ["string"], ["double"], ["timestamp"], ["string", "long_2"]])
@pytest.mark.parametrize("output_mode", ["append", "complete"])
def test_the_columnar_state_gives_the_per_key_codes_rows_for_every_key_type(tmp_path, group_by, output_mode):
    _same_runs(tmp_path, group_by, output_mode, objects=False, seed=len(group_by) * 7 + len(output_mode))


@pytest.mark.parametrize("seed", [1, 2])
def test_object_aggregates_merge_in_start_order_as_the_per_key_code_does(tmp_path, seed):
    _same_runs(tmp_path, ["string"], "append", objects=True, seed=seed)


def test_a_state_the_per_key_code_wrote_goes_on_with_the_columnar_code(tmp_path):
    _same_runs(tmp_path, ["string", "long_2"], "append", objects=True, seed=9, switch_at=4)


def test_the_merge_of_overlapping_sessions_equals_the_per_key_merge_of_each_group():
    rng = np.random.default_rng(5)
    rows = 3000
    deltas = _deltas(rng, {"long": list(range(50))}, 0, rows, objects=True)
    values = AggValues.of(NUMBERS + OBJECTS, deltas.schema, False, 100)
    cells, objects = values.delta_states(deltas), values.objects.delta_states(deltas)
    group = deltas["long"].to_numpy()
    starts, ends = deltas[START].to_numpy(), deltas[END].to_numpy()
    merged = merge_overlapping(Sessions(group, starts, ends, cells, objects), values.states, values.objects)

    by_group: dict[int, list[Session]] = {}
    for r in range(rows):
        by_group.setdefault(int(group[r]), []).append(Session(int(starts[r]), int(ends[r]), cells[r], objects[r]))
    expected = [
        (g, s.start, s.end, s.cells.tolist(), s.objects)
        for g in sorted(by_group)
        for s in _merged(sorted(by_group[g], key=lambda s: s.start), values)
    ]
    got = [
        (int(g), int(s), int(e), c.tolist(), o)
        for g, s, e, c, o in zip(merged.group, merged.start, merged.end, merged.cells, merged.objects)
    ]
    assert got == expected
    assert len(got) < rows  # sessions did merge


def test_records_round_trip_with_groups_without_sessions_and_read_the_older_pickled_layout():
    width = 2
    sessions = Sessions(
        np.array([0, 0, 2, 3, 3, 3]),
        np.array([1, 5, 2, 7, 9, 11]),
        np.array([3, 6, 4, 8, 10, 12]),
        np.arange(12).reshape(6, 2),
        [[f"o{i}"] for i in range(6)],
    )
    records = encode(sessions, 5)
    assert [r is None for r in records] == [False, True, False, False, True]
    back = decode(records, width, with_objects=True)
    assert back.group.tolist() == sessions.group.tolist() and back.objects == sessions.objects
    assert (back.start, back.end) == (pytest.approx(sessions.start), pytest.approx(sessions.end))
    assert back.cells.tolist() == sessions.cells.tolist()
    older = pickle.dumps((3, [(1, 3, np.array([7, 1], np.int64).tobytes(), [])]), protocol=5)
    mixed = decode([None, older, records[2]], width, with_objects=False)
    assert (
        mixed.group.tolist() == [1, 2] and mixed.start.tolist() == [1, 2] and mixed.cells.tolist() == [[7, 1], [4, 5]]
    )


def test_an_aggregation_of_object_aggregates_only_has_sessions_without_cells(tmp_path):
    """min of a string is an object aggregate: with no other aggregate a session has no int64 cells at all."""
    rng = np.random.default_rng(3)
    columnar = _Run(tmp_path / "columnar", SessionAggregation(["k"], [Agg("low", "min", "s")], "session", "t", "3s"))
    per_key = _Run(
        tmp_path / "per-key",
        PerKeySessionAggregation(["k"], [Agg("low", "min", "s")], "session", "t", "3s"),
        memory_tier=False,
    )
    try:
        emitted = 0
        for n in range(6):
            rows = int(rng.integers(1, 30))
            starts = n * 6 * SECOND + rng.integers(0, 40, rows) * (SECOND // 2)
            deltas = pa.table(
                {
                    "k": pa.array(rng.integers(0, 5, rows)),
                    START: pa.array(starts),
                    END: pa.array(starts + 2 * SECOND),
                    ROWS: pa.array(np.ones(rows, np.int64)),
                    MAX_EVENT: pa.array(starts),
                    "_o0": pa.array([f"s{v}" for v in rng.integers(0, 9, rows)]),
                    "_c0": pa.array(np.ones(rows, np.int64)),
                }
            )
            got = columnar.batch(deltas)
            assert got == per_key.batch(deltas), f"batch {n}"
            emitted += len(got[0])
        assert emitted > 0
    finally:
        columnar.close()
        per_key.close()
