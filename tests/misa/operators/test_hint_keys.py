"""Every job's operator names its state keys one stage early: the keys its hints name are the keys its batch reads.

The hint rows are made as the hint job makes them (``extract_partition`` over the upstream rows, or
over the operator's ``hint_input`` where its key is not an upstream column), and the batch's reads
are recorded on a real state view.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from test_nexmark_ops import bids, events, q13, q20
from test_processor import Clock
from test_processor import operator as processor_operator
from test_processor import rows as processor_rows

from misa.operators.aggregation import Agg, Aggregation
from misa.operators.dedup import Deduplicate
from misa.operators.keyed import TopN
from misa.operators.lookup_aggregation import LookupAggregation
from misa.operators.sessions import END, START, SessionAggregation
from misa.operators.stream_join import JoinSide, StreamJoin
from misa.state.store import StateStore
from misa.state.view import StateView
from prefetch.hints import extract_partition


@pytest.fixture
def view(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        yield StateView(store)


def reads_of(operator, deltas: pa.Table, view: StateView) -> set[bytes]:
    """The keys one batch of ``operator`` reads."""
    read: set[bytes] = set()
    get_many = view.get_many

    def recording(keys, ts=0):
        read.update(keys)
        return get_many(keys, ts)

    view.get_many = recording  # type: ignore[method-assign]
    try:
        operator.apply(deltas, view)
    finally:
        view.get_many = get_many  # type: ignore[method-assign]
    return read


def hinted(operator, upstream: pa.Table) -> tuple[set[bytes], np.ndarray]:
    spec = operator.hint_spec()
    rows = upstream.select(spec.input_columns).to_batches()
    hints = pa.Table.from_batches(list(extract_partition(iter(rows), spec, None)))
    keys, ts = operator.hint_keys(hints)
    assert len(keys) == len(ts)
    return set(keys), ts


def test_top_n_hints_each_keys_first_rows(view):
    op = TopN(["bidder", "auction"], ["price", "date_time"], [("price", "descending"), ("date_time", "ascending")],
              time_column="date_time")  # fmt: skip
    for batch in (bids((1, 1, 5, 100), (1, 2, 6, 101), (2, 1, 7, 102)), bids((1, 1, 9, 103), (3, 3, 1, 104))):
        keys, ts = hinted(op, batch)
        assert keys == reads_of(op, batch.select(["bidder", "auction", "price", "date_time"]), view)
        assert ts.max() == batch["date_time"].to_numpy().max() * 1000  # epoch ms as the cache's microseconds


def test_lookup_join_hints_the_side_rows_once_the_side_table_is_loaded(view, side):
    op = q13(side)
    first = bids((13, 1, 5, 100), (20, 2, 6, 101)).select(["auction", "bidder", "price", "date_time"])
    assert hinted(op, first)[0] == set()  # the side table is not in the state yet: nothing to prefetch
    op.apply(first, view)
    batch = bids((13, 1, 5, 100), (27, 2, 6, 101), (None, 3, 1, 102), (-4, 4, 1, 103))
    batch = batch.select(["auction", "bidder", "price", "date_time"])
    keys, _ = hinted(op, batch)
    assert keys == reads_of(op, batch, view) and len(keys) == 4  # 3, 7, -4 and null (both find no side row)


def test_keyed_join_hints_right_rows_and_the_left_rows_a_right_row_releases(view):
    op = q20()
    batch = events(("b", 1, 100), ("a", 2, 10), ("b", 2, 101), ("a", 3, 5), ("b", 4, 102))
    left, right = batch["bid"], batch["auction"]
    is_right = pc.is_valid(right)
    hint_input = pa.table(
        {
            "_hint_join_key": pc.if_else(is_right, pc.struct_field(right, "id"), pc.struct_field(left, "auction")),
            "_hint_is_right": pc.cast(is_right, pa.int32()),
            "_hint_time": pc.if_else(is_right, pc.struct_field(right, "date_time"), pc.struct_field(left, "date_time")),
        }
    )
    keys, _ = hinted(op, hint_input)
    read = reads_of(op, batch, view)
    right_rows, waiting = b"r", b"l"
    assert {k for k in keys if k.startswith(right_rows)} == {k for k in read if k.startswith(right_rows)}
    # the waiting lists a new right row releases are hinted; the lists unmatched bids append to are
    # not (a bid usually finds its auction, so hinting every bid's list would mostly be wasted)
    assert {k for k in keys if k.startswith(waiting)} == {waiting + k[1:] for k in keys if k[-1:] in (b"\x02", b"\x03")}
    assert {k for k in keys if k.startswith(waiting)} <= read


def test_lookup_aggregation_hints_the_looked_up_values(view):
    aggregation = Aggregation(["campaign"], [Agg("views", "count", "t")], event_time="ts", window="10 seconds")
    op = LookupAggregation("ad", aggregation, lambda keys: [f"c{int(k) % 2}" for k in keys])
    upstream = pa.table({"ad": ["1", "2", "1", None], "t": [1, 2, 3, 4]}).append_column(
        "ts", pa.array([1_000_000, 2_000_000, 3_000_000, 4_000_000], pa.timestamp("us", "UTC"))
    )
    deltas = pa.table(
        {
            "_window_start_us": [0, 0],
            "_window_end_us": [10_000_000, 10_000_000],
            "ad": ["1", "2"],
            "_rows": [2, 1],
            "_max_event_us": [3_000_000, 2_000_000],
            **{f"_{f}0": [2, 1] for f in "vc"},
        }
    )
    keys, ts = hinted(op, upstream)
    assert keys == {k for k in reads_of(op, deltas, view) if k.startswith(b"\xfflookup:")} and len(keys) == 2
    assert sorted(ts.tolist()) == [2_000_000, 3_000_000]


TS = pa.timestamp("us", "UTC")


@pytest.mark.parametrize("form", ["dropDuplicates", "with the event time", "within the watermark"])
def test_deduplication_hints_the_keys_it_looks_up(view, form):
    event_time = None if form == "dropDuplicates" else "ts"
    op = Deduplicate(["k", "x"], event_time, "5s" if event_time else None, within_watermark=form.startswith("within"))
    batch = pa.table(
        {"k": [1, 2, 1, None], "x": [-0.0, 0.0, 0.0, 1.5], "ts": pa.array([1, 2, 3, 4], pa.int64()).cast(TS)}
    )
    keys, _ = hinted(op, batch)
    read = reads_of(op, batch, view)
    assert keys == read and len(read) == (4 if form == "with the event time" else 3)  # -0.0 is 0.0


def test_session_windows_hint_each_groups_record(view):
    op = SessionAggregation(["k"], [Agg("n", "count", "t")], "session", "ts")
    upstream = pa.table({"k": ["a", "b", "a"], "t": [1, 2, 3], "ts": pa.array([1, 2, 3], pa.int64()).cast(TS)})
    deltas = pa.table(
        {
            "k": ["a", "b"],
            START: [1, 2],
            END: [5_000_001, 5_000_002],
            "_rows": [2, 1],
            "_max_event_us": [3, 2],
            **{f"_{f}0": [2, 1] for f in "vc"},
        }
    )
    keys, _ = hinted(op, upstream)
    assert keys == reads_of(op, deltas, view) and len(keys) == 2


def test_a_stream_join_hints_both_sides_rows_of_each_key(view):
    op = StreamJoin(1, JoinSide("l0"), JoinSide("r0"))
    left, right = pa.struct([("l0", TS)]), pa.struct([("r0", TS)])
    batch = pa.table(
        {
            "_side": pa.array([0, 1, 1], pa.int32()),
            "_k0": [1.0, -0.0, 0.0],
            "_l": pa.array([{"l0": 5}, None, None], left),
            "_r": pa.array([None, {"r0": 6}, {"r0": 7}], right),
        }
    )
    keys, _ = hinted(op, batch)
    assert keys == reads_of(op, batch, view) and len(keys) == 4  # two keys (-0.0 is 0.0), both sides each


def test_a_stateful_processor_hints_its_keys_variables_and_timers(run):
    runner = run(processor_operator(Clock()))
    runner.batch(processor_rows(("a", 1), ("b", 1)))  # init names the variables
    batch = processor_rows(("a", 2), ("c", 3))
    keys, _ = hinted(runner.operator, batch)
    assert keys == reads_of(runner.operator, batch, runner.view) and len(keys) == 2 * 5  # 4 variables, timers
