"""Object aggregates over sliding windows (issue 63, item 5): pane states combined into each window's give what one
state per (window, key) folding every row in Spark's order gives, ties of max_by / min_by included."""

from __future__ import annotations

import random
from collections import defaultdict
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from misa.operators.aggregation import Agg, Aggregation
from misa.operators.object_aggs import ObjectValues
from misa.operators.pane_objects import PaneObjects
from misa.operators.panes import PaneRecords, Panes
from misa.state.store import StateStore
from misa.state.view import StateView
from tests.sliding_reference import SLIDE, PerWindowReference, S
from tests.state_helpers import apply_then_idle

SUM_TYPE = pa.decimal128(22, 2)
AGGS = [
    Agg("top", "max_by", "s", other="o"),
    Agg("bottom", "min_by", "s", other="o"),
    Agg("lo", "min", "s"),
    Agg("hi", "max", "s"),
    Agg("total", "sum", "d"),
]


@pytest.fixture
def view(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        yield StateView(store)


Row = tuple[int, int, str, Decimal]  # event time (us), key, s, d


def ordering(t: int) -> int:
    return t // (SLIDE) % 4


def by(function: str, rows: list[Row]) -> tuple[Any, Any]:
    """Spark's max_by / min_by of s ordered by :func:`ordering`, rows in order: a later row wins a tie."""
    best: tuple[Any, Any] = (None, None)
    for t, _, s, _ in rows:
        o = ordering(t)
        if best[1] is None or (o >= best[1] if function == "max_by" else o <= best[1]):
            best = (s, o)
    return best


def pane_deltas(rows: list[Row]) -> pa.Table:
    """What Aggregation.deltas computes on Spark: one row per (pane, key) of the batch's rows, in their order."""
    groups: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for row in rows:
        groups[(row[0] // SLIDE * SLIDE + SLIDE, row[1])].append(row)
    cols: dict[str, list] = defaultdict(list)
    for (end, g), members in groups.items():
        cols["_pane_end_us"].append(end)
        cols["g"].append(g)
        cols["_rows"].append(len(members))
        cols["_max_event_us"].append(max(r[0] for r in members))
        for i, function in enumerate(("max_by", "min_by")):
            value, extremum = by(function, members)
            cols[f"_o{i}"] += [value]
            cols[f"_r{i}"] += [extremum]
            cols[f"_c{i}"] += [len(members)]
        strings = [r[2] for r in members]
        cols["_o2"] += [min(strings)]
        cols["_o3"] += [max(strings)]
        cols["_o4"] += [sum((r[3] for r in members), Decimal(0))]
        for i in (2, 3, 4):
            cols[f"_c{i}"] += [len(members)]
    types = {"_o0": pa.string(), "_o1": pa.string(), "_o2": pa.string(), "_o3": pa.string(), "_o4": SUM_TYPE}
    names = ["_pane_end_us", "g", "_rows", "_max_event_us", "_o0", "_r0", "_c0", "_o1", "_r1", "_c1"]
    names += ["_o2", "_c2", "_o3", "_c3", "_o4", "_c4"]
    return pa.table({k: pa.array(cols[k], types.get(k, pa.int64())) for k in names})


def window_value(rows: list[Row]) -> tuple:
    """A window's max_by, min_by, min and max of ``s`` and sum of ``d``, as Spark computes them (ties by ordering)."""
    strings = [r[2] for r in rows]
    total = sum((r[3] for r in rows), Decimal(0))
    return by("max_by", rows)[0], by("min_by", rows)[0], min(strings), max(strings), total


def output_rows(table: pa.Table) -> set:
    return {
        (int(r["window_end"].timestamp() * S), r["g"], r["top"], r["bottom"], r["lo"], r["hi"], r["total"])
        for r in table.to_pylist()
    }


@pytest.mark.parametrize("mode", ["update", "append"])
def test_object_aggregates_over_panes_give_each_windows_value_with_sparks_ties(view, mode):
    op = Aggregation(["g"], AGGS, event_time="t", window="20s", slide="5s", watermark_delay="4s", output_mode=mode)
    reference = PerWindowReference(4, mode == "append", window_value)
    rng = random.Random(63 if mode == "update" else 64)
    now, emitted = 0, 0
    for batch in range(30):
        rows = []
        for _ in range(rng.randint(0, 12)):
            t = max(0, now - rng.randint(0, 8000) * 1000 + rng.randint(0, 3000) * 1000)  # whole ms, as Spark's
            rows.append((t, rng.randint(0, 2), rng.choice("abcde") + str(batch), Decimal(rng.randint(-999, 999)) / 100))
        now += 3 * S
        result = apply_then_idle(op, pane_deltas(rows), view)
        view.freeze(batch)
        assert output_rows(result.output) == set(reference.batch(rows)), f"batch {batch}"
        emitted += result.output.num_rows
    assert emitted > 20


def test_pane_records_keep_object_states_with_their_rows():
    records = PaneRecords(cells=2, objects=True)
    states = np.array([[1, 2], [3, 4], [5, 6]], np.int64)
    objects = [[["a", 1, 0]], [[None, None, -1]], [[Decimal("1.50"), 3, 2]]]
    panes = Panes(np.array([0, 0, 2]), np.array([10, 20, 30]), states, objects)
    encoded = records.encode(3, np.array([7, -1, 9]), panes)
    assert encoded[1] is None
    timers, decoded = records.decode(encoded)
    assert timers.tolist() == [7, -1, 9]
    assert decoded.keys.tolist() == [0, 0, 2] and decoded.ends.tolist() == [10, 20, 30]
    assert decoded.states.tolist() == states.tolist() and decoded.objects == objects


def test_a_tie_goes_to_the_later_batch_across_panes_and_to_the_later_pane_within_one():
    schema = pa.schema([("_o0", pa.string()), ("_r0", pa.int64()), ("_c0", pa.int64())])
    folder = PaneObjects(ObjectValues.of([(0, "top", "max_by")], schema, False, 10))
    later_pane_earlier_batch = folder.stamped([[["x", 5]]], 1)[0]
    earlier_pane_later_batch = folder.stamped([[["y", 5]]], 2)[0]
    assert folder.fold([earlier_pane_later_batch, later_pane_earlier_batch], np.array([0]))[0][0][0] == "y"
    same_batch = folder.stamped([[["p", 5]], [["q", 5]]], 3)
    assert folder.fold(same_batch, np.array([0]))[0][0][0] == "q"
