"""first / last / collect_list / collect_set over sliding windows (issue 63, item 5): panes whose values are stamped
with their batch and place give each window's value over its rows in Spark's order (batches, then places), as one
state per (window, key) folding every row in that order gives it; and every object aggregate runs over panes."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from misa.exceptions import MisaError
from misa.operators.aggregation import TWO_COLUMNS, Agg, Aggregation
from misa.operators.object_aggs import MERGE_ORDERED, OBJECT_FUNCTIONS
from misa.operators.pane_order import delta_items, merge_items, plain_state
from misa.operators.percentile import EXACT_PERCENTILES
from misa.operators.percentile_approx import Percentiles
from misa.operators.sketches import SKETCH_FUNCTIONS, Sketch
from misa.operators.top_k_by import TOP_K_FUNCTIONS
from misa.state.store import StateStore
from misa.state.view import StateView
from tests.sliding_reference import SLIDE, PerWindowReference, S
from tests.state_helpers import apply_then_idle

FUNCTIONS = ("first", "last", "first_ignore_nulls", "last_ignore_nulls", "collect_list", "collect_set")
AGGS = [Agg(f, f, "v") for f in FUNCTIONS]
Row = tuple[int, int, int, Any]  # event time (us), key, place in its batch, v


@pytest.fixture
def view(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        yield StateView(store)


def of_rows(function: str, rows: list[Row]) -> Any:
    """Spark's value of ``function`` over rows in its order."""
    values = [r[3] for r in rows]
    present = [v for v in values if v is not None]
    if function in ("first", "last"):
        return values[0 if function == "first" else -1] if values else None
    if function.endswith("_ignore_nulls"):
        return (present[0] if function.startswith("first") else present[-1]) if present else None
    if function == "collect_list":
        return present
    return list(dict.fromkeys(present))


def pane_deltas(rows: list[Row]) -> pa.Table:
    """What Aggregation.deltas computes on Spark (pane_order.order_partial): per (pane, key), each function's value
    and its place (collect: the lists), the rows' partitions merged in partition order."""
    groups: dict[tuple[int, int], list[Row]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: r[2]):
        groups[(row[0] // SLIDE * SLIDE + SLIDE, row[1])].append(row)
    cols: dict[str, list] = defaultdict(list)
    for (end, g), members in groups.items():
        cols["_pane_end_us"].append(end)
        cols["g"].append(g)
        cols["_rows"].append(len(members))
        cols["_max_event_us"].append(max(r[0] for r in members))
        present = [r for r in members if r[3] is not None]
        for i, function in enumerate(FUNCTIONS):
            pick = present if function.endswith("_ignore_nulls") else members
            chosen = pick[0 if function.startswith("first") else -1] if pick else None
            if function.startswith("collect"):
                cols[f"_o{i}"].append([r[3] for r in present])
                cols[f"_r{i}"].append([r[2] for r in present])
            else:
                cols[f"_o{i}"].append(chosen[3] if chosen else None)
                cols[f"_r{i}"].append(chosen[2] if chosen else None)
            cols[f"_c{i}"].append(len(present))
    fields = {"_o": pa.int64(), "_r": pa.int64(), "_c": pa.int64()}
    table = {k: pa.array(cols[k], pa.int64()) for k in ("_pane_end_us", "g", "_rows", "_max_event_us")}
    for i, function in enumerate(FUNCTIONS):
        for prefix, t in fields.items():
            listed = function.startswith("collect") and prefix != "_c"
            table[f"{prefix}{i}"] = pa.array(cols[f"{prefix}{i}"], pa.list_(t) if listed else t)
    return pa.table(table)


def window_values(rows: list[Row]) -> tuple:
    """Every function's value over a window's rows in Spark's order (batches, then places)."""
    return tuple(of_rows(f, rows) for f in FUNCTIONS)


def output_rows(table: pa.Table) -> list:
    rows = [(int(r["window_end"].timestamp() * S), r["g"], *(r[f] for f in FUNCTIONS)) for r in table.to_pylist()]
    return sorted(rows, key=repr)


def random_batch(rng: random.Random, now: int) -> list[Row]:
    """Rows in two partitions (places ``partition << 33 | row``, as monotonically_increasing_id), listed out of
    place order; values repeat (collect_set) and are null a third of the time (the ignoring-nulls forms)."""
    count = rng.randint(0, 12)
    split = rng.randint(0, count)
    places = [(0 if i < split else 1 << 33) + i for i in range(count)]
    rows = []
    for place in places:
        t = max(0, now - rng.randint(0, 8000) * 1000 + rng.randint(0, 3000) * 1000)
        rows.append((t, rng.randint(0, 2), place, rng.choice((None, 1, 2, 3, 4, 5))))
    rng.shuffle(rows)  # deltas and the reference order rows by place, not by their order here
    return rows


@pytest.mark.parametrize("mode", ["update", "append"])
def test_order_functions_over_panes_give_each_windows_value_in_sparks_row_order(view, mode):
    op = Aggregation(["g"], AGGS, event_time="t", window="20s", slide="5s", watermark_delay="4s", output_mode=mode)
    reference = PerWindowReference(4, mode == "append", window_values, order=lambda row: row[2])
    rng = random.Random(635 if mode == "update" else 636)
    now, emitted = 0, 0
    for batch in range(30):
        rows = random_batch(rng, now)
        now += 3 * S
        result = apply_then_idle(op, pane_deltas(rows), view)
        view.freeze(batch)
        assert output_rows(result.output) == reference.batch(rows), f"batch {batch}"
        emitted += result.output.num_rows
    assert emitted > 20


def merged(function: str, *states: list) -> list:
    """Item lists merged one after the other, as panes fold, read as ObjectAgg's state."""
    items = states[0]
    for other in states[1:]:
        items = merge_items(function, "x", items, other, 10)
    return plain_state(function, items)


def test_items_merge_in_stamp_order_whatever_the_panes_order():
    earlier_pane = delta_items("collect_list", [5, 6], [1 << 33, 2], batch=4)  # listed out of place order
    later_pane = delta_items("collect_list", [7], [3], batch=4)
    older = delta_items("collect_list", [8], [9], batch=3)
    assert merged("collect_list", earlier_pane, later_pane, older) == [[8, 6, 7, 5], 4]
    firsts = [delta_items("first", v, p, b) for v, p, b in (("x", 1, 3), ("y", 0, 3), (None, 7, 2))]
    assert merged("first", *firsts) == [None, 1]  # the earlier batch's row, null included
    assert merged("last", *firsts) == ["x", 1]
    sets = delta_items("collect_set", [1, 2, 1], [5, 4, 3], batch=1)
    assert merged("collect_set", sets, delta_items("collect_set", [2], [9], 0)) == [[2, 1], 2]


def test_a_windows_collect_list_past_its_limit_fails_the_batch_naming_it():
    panes = [delta_items("collect_list", [1, 2], [0, 1], 0), delta_items("collect_list", [3], [2], 0)]
    with pytest.raises(MisaError, match="collect_list c: a group holds more than 2 items"):
        merge_items("collect_list", "c", *panes, 2)


@pytest.mark.parametrize("function", [f for f in OBJECT_FUNCTIONS if f not in MERGE_ORDERED])
def test_every_object_aggregate_runs_over_sliding_windows(function):
    other = "o" if function in TWO_COLUMNS else ""
    if function in ("percentile_approx", *EXACT_PERCENTILES):  # of numbers, at its percentages
        agg = Agg("x", function, "o", percentiles=Percentiles((0.5,)))
    elif function in SKETCH_FUNCTIONS:  # Spark's sketch of each pane's rows, merged
        agg = Agg("x", function, "s", other, sketch=Sketch(function))
    elif function in TOP_K_FUNCTIONS:
        agg = Agg("x", function, "s", other, k=2)
    else:
        agg = Agg("x", function, "s", other)
    op = Aggregation(["g"], [agg], event_time="t", window="20s", slide="5s")
    fields = [("g", T.LongType()), ("s", T.StringType()), ("o", T.LongType()), ("t", T.TimestampType())]
    assert op.signature(T.StructType([T.StructField(n, t) for n, t in fields]))["slide"]


@pytest.mark.parametrize("function", list(MERGE_ORDERED))
def test_an_aggregate_of_the_rows_order_is_refused_over_sliding_windows_naming_the_reason(function):
    """Spark builds each sliding window's histogram (approx_top_k's sketch, its ties in the order rows came) from its
    rows: panes cannot give it (tumbling windows run)."""
    constants = {"bins": 3} if function == "histogram_numeric" else {"sketch": Sketch(function, (3, 10))}
    agg = Agg("x", function, "o", **constants)
    with pytest.raises(ValueError, match=f"{function} over sliding windows: Spark builds each window's"):
        Aggregation(["g"], [agg], event_time="t", window="20s", slide="5s")
    assert Aggregation(["g"], [agg], event_time="t", window="20s").time_keyed is False


def test_collect_set_keeps_values_as_sparks_set_does():
    """Spark 4.3's collect_set keeps -0.0 as 0.0 and one NaN, in arrays too (collect_list keeps them as they are)."""
    nan = float("nan")
    scalars = delta_items("collect_set", [-0.0, nan, 0.0, float("nan"), 1.5], [0, 1, 2, 3, 4], 0)
    assert repr(merged("collect_set", scalars, delta_items("collect_set", [nan], [0], 1))[0]) == "[0.0, nan, 1.5]"
    arrays = delta_items("collect_set", [[-0.0, nan], [0.0, float("nan")]], [0, 1], 0)
    assert repr(plain_state("collect_set", arrays)[0]) == "[[0.0, nan]]"
    assert repr(plain_state("collect_list", delta_items("collect_list", [-0.0], [0], 0))[0]) == "[-0.0]"


def test_collect_set_across_batches_keeps_one_nan_and_takes_negative_zero_as_zero():
    """A tumbling window's collect_set merges each batch's set into the state's as Spark's set would: one NaN, -0.0
    and 0.0 one value (Python's equality kept a second NaN)."""
    from misa.operators.set_values import set_union

    union = set_union([1.0, float("nan"), 0.0], [float("nan"), -0.0, 2.0, [float("nan")]])
    assert len(union) == 5 and union[3] == 2.0 and math.isnan(union[4][0])
    assert set_union([[-0.0]], [[0.0]]) == [[0.0]]
