"""Sliding windows stored as panes: the same output as one state entry per (window, key), one entry per pane."""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

from misa.operators.aggregation import Agg, Aggregation
from misa.operators.panes import PaneWindows
from misa.state.store import StateStore
from misa.state.view import StateView
from tests.state_helpers import apply_then_idle

S = 1_000_000


@pytest.fixture
def view(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        yield StateView(store)


def pane_deltas(events: list[tuple[int, int, float]], pane_us: int) -> pa.Table:
    """What Aggregation.deltas computes on Spark for sliding windows: one row per (pane, key)."""
    groups: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for t, g, x in events:
        groups[(t // pane_us * pane_us + pane_us, g)].append((t, x))
    cols: dict[str, list] = defaultdict(list)
    for (end, g), values in groups.items():
        xs = [x for _, x in values]
        cols["_pane_end_us"].append(end)
        cols["g"].append(g)
        cols["_rows"].append(len(values))
        cols["_max_event_us"].append(max(t for t, _ in values))
        for i, partial in enumerate([sum(xs), len(xs), min(xs), max(xs)]):  # sum, count, min, max of x
            cols[f"_v{i}"].append(partial)
            cols[f"_c{i}"].append(len(xs))
    names = ["_pane_end_us", "g", "_rows", "_max_event_us", *(f"_{f}{i}" for i in range(4) for f in "vc")]
    floats = ("_v0", "_v2", "_v3")
    return pa.table({k: pa.array(cols[k], pa.float64() if k in floats else pa.int64()) for k in names})


class PerWindowReference:
    """Spark's semantics with one state entry per (window, key), the layout panes replace."""

    def __init__(self, size: int, slide: int, delay_ms: int, append: bool):
        self.size, self.slide, self.delay_ms, self.append = size, slide, delay_ms, append
        self.state: dict[tuple[int, int], list[float]] = {}
        self.watermark, self.max_event = 0, None

    def batch(self, events: list[tuple[int, int, float]]) -> tuple[set, int]:
        out, late, changed = set(), 0, set()
        for t, g, x in events:
            self.max_event = t if self.max_event is None else max(self.max_event, t)
            start = t // self.slide * self.slide
            while start > t - self.size:
                end = start + self.size
                if end <= self.watermark:
                    late += 1
                else:
                    s, c, n, m = self.state.get((end, g), [0.0, 0.0, float("inf"), float("-inf")])
                    self.state[(end, g)] = [s + x, c + 1, min(n, x), max(m, x)]
                    changed.add((end, g))
                start -= self.slide
        if not self.append:
            out = {self.row(e, g, self.state[(e, g)]) for e, g in changed}
        if self.max_event is not None:
            candidate = (self.max_event // 1000 - self.delay_ms) * 1000
            if candidate > self.watermark:
                self.watermark = candidate
                for e, g in sorted(k for k in self.state if k[0] <= candidate):
                    value = self.state.pop((e, g))
                    if self.append:
                        out.add(self.row(e, g, value))
        return out, late

    @staticmethod
    def row(end: int, g: int, value: list[float]) -> tuple:
        s, c, n, m = value
        return end, g, round(s, 9), c, n, m


def rows(table: pa.Table) -> set:
    """(window end, key, sum, count, min, max) of an output, floats rounded."""
    return {
        (int(r["window_end"].timestamp() * S), r["g"], round(r["s"], 9), float(r["n"]), r["lo"], r["hi"])
        for r in table.to_pylist()
    }


@pytest.mark.parametrize(
    ("size_s", "slide_s", "delay_s", "mode"),
    [(30, 1, 5, "update"), (20, 5, 3, "append"), (10, 4, 2, "update"), (10, 4, 0, "append"), (60, 10, 20, "update")],
)
def test_panes_give_the_per_window_layouts_output_on_random_streams_with_late_events(
    view, size_s, slide_s, delay_s, mode
):
    size, slide = size_s * S, slide_s * S
    aggs = [Agg("s", "sum", "x"), Agg("n", "count", "x"), Agg("lo", "min", "x"), Agg("hi", "max", "x")]
    op = Aggregation(
        ["g"],
        aggs,
        event_time="t",
        window=f"{size_s}s",
        slide=f"{slide_s}s",
        watermark_delay=f"{delay_s}s",
        output_mode=mode,
    )
    reference = PerWindowReference(size, slide, delay_s * 1000, mode == "append")
    rng = random.Random(size_s * 100 + slide_s + delay_s)
    pane = PaneWindows(size, slide).pane_us
    now, late_total = 0, 0
    for batch in range(25):
        events = []
        for _ in range(rng.randint(0, 40)):
            jitter = rng.randint(0, (delay_s + 4) * S)  # some events arrive behind the watermark
            events.append((max(0, now - jitter + rng.randint(0, 3 * S)), rng.randint(0, 6), rng.uniform(-5, 5)))
        now += 3 * S
        expected, late = reference.batch(events)
        deltas = pane_deltas(events, pane)
        result = apply_then_idle(op, deltas, view)
        view.freeze(batch)  # the next batch reads this one's changes below the cache
        assert rows(result.output) == expected
        assert result.late_rows == late
        late_total += late
    assert late_total > 0  # the streams did exercise late windows


def test_an_event_writes_its_one_pane_not_every_window_that_holds_it(view):
    op = Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="30s", slide="1s", watermark_delay="10s")
    events = [(100 * S + i, g, 1.0) for i, g in enumerate(range(50))]
    result = apply_then_idle(op, pane_deltas(events, S), view)
    assert result.output.num_rows == 50 * 30  # every window of every key is emitted
    changes = view.freeze(0).buffer.changes
    assert len(changes) == 50 * 2  # one pane record and one timer per key, not 30 window entries
    assert result.state_reads == 50


def test_closed_panes_and_their_records_leave_the_state(view):
    op = Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", slide="5s", watermark_delay="0s")
    apply_then_idle(op, pane_deltas([(1 * S, 1, 2.0), (2 * S, 2, 3.0)], 5 * S), view)
    view.freeze(0)
    apply_then_idle(op, pane_deltas([(40 * S, 3, 1.0)], 5 * S), view)  # the watermark passes every window of keys 1, 2
    view.freeze(1)
    assert op.watermark.at_us == 40 * S
    records, timers = view.scan(b"\xfep", b"\xfeq"), view.scan(b"\xfet", b"\xfeu")
    assert [k[-8:] for k, _ in records] == [(3).to_bytes(8, "big")]  # keys 1 and 2 are gone
    assert len(timers) == 1 and timers[0][0].endswith((3).to_bytes(8, "big"))


@pytest.mark.parametrize("mode,reads", [("update", 1), ("append", 2)])
def test_update_mode_drops_due_records_without_reading_them(view, monkeypatch, mode, reads):
    """In update mode a key's timer is its last window's end, so a record due at the watermark has only dead
    panes: it is deleted unread (on a slow volume those reads were the close's whole cost). Append mode must
    read it to emit its closed windows."""
    op = Aggregation(
        ["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", slide="5s", watermark_delay="0s", output_mode=mode
    )
    apply_then_idle(op, pane_deltas([(1 * S, 1, 2.0), (2 * S, 2, 3.0)], 5 * S), view)
    view.freeze(0)
    calls: list[int] = []
    real = view.get_many
    monkeypatch.setattr(view, "get_many", lambda keys, ts=0: calls.append(len(keys)) or real(keys, ts))
    apply_then_idle(op, pane_deltas([(40 * S, 3, 1.0)], 5 * S), view)  # closes every window of keys 1 and 2
    assert len(calls) == reads  # the batch's own key, and in append mode the due records
    view.freeze(1)
    assert [k[-8:] for k, _ in view.scan(b"\xfep", b"\xfeq")] == [(3).to_bytes(8, "big")]


def test_a_version_written_per_window_is_refused_by_the_pane_layout():
    op = Aggregation(["g"], [Agg("s", "sum", "x")], event_time="t", window="30s", slide="1s")
    with pytest.raises(ValueError, match="new checkpoint location"):
        op.restore({"watermark_us": 5, "max_event_us": 10})
    op.restore(op.metadata())


@pytest.mark.parametrize(
    ("size", "slide", "start"), [(30, 1, 0), (20, 5, 0), (10, 4, 0), (60, 10, 0), (7, 3, 0), (20, 5, 3), (10, 4, 2)]
)
def test_pane_geometry_matches_sparks_window_assignment(size, slide, start):
    windows = PaneWindows(size, slide, start)
    window_ends = range(start + size - 100 * slide, 10 * size, slide)  # Spark's: start + k * slide + size
    for pane_end in range(windows.pane_offset_us + windows.pane_us, 5 * size, windows.pane_us):
        t = pane_end - windows.pane_us  # any event time in the pane gives the same windows
        spark = [e for e in window_ends if e - size <= t < e]
        first, last = windows.first_window_end(np.array([pane_end])), windows.last_window_end(np.array([pane_end]))
        assert list(range(int(first[0]), int(last[0]) + 1, slide)) == spark
        for watermark in range(0, 6 * size, 1):
            late = int(windows.late_windows(np.array([pane_end]), watermark)[0])
            assert late == sum(1 for e in spark if e <= watermark)
            assert windows.last_closed_end(watermark) == max(e for e in window_ends if e <= watermark)
            assert windows.next_window_end(watermark) == min(e for e in window_ends if e > watermark)


@pytest.mark.parametrize("seed", range(4))
def test_windows_of_gives_each_distinct_key_and_window_once_in_key_and_end_order(seed):
    """The runs of one key's rows merged (overlapping, touching, disjoint, empty, clipped), against
    every (row, window) pair enumerated one by one."""
    rng = np.random.default_rng(seed)
    for _ in range(100):
        windows = PaneWindows(int(rng.choice([10, 30, 60])) * S, int(rng.choice([1, 5, 10])) * S)
        n = int(rng.integers(0, 40))
        keys = rng.integers(0, 6, n)
        first, last = windows.open_window_ends(rng.integers(1, 50, n) * windows.pane_us, int(rng.integers(-5, 30)) * S)
        through = None if rng.random() < 0.5 else int(rng.integers(0, 80)) * S
        clipped = last if through is None else np.minimum(last, windows.last_closed_end(through))
        expected = sorted(
            {(int(k), int(e)) for k, lo, hi in zip(keys, first, clipped) for e in range(lo, hi + 1, windows.slide_us)}
        )
        got_keys, got_ends = windows.windows_of(keys, first, last, through)
        assert list(zip(got_keys.tolist(), got_ends.tolist())) == expected


@pytest.mark.parametrize("mode", ["append", "update"])
def test_the_records_due_at_the_next_watermark_are_named_before_the_batch_reads_them(view, monkeypatch, mode):
    """Timer-driven prefetching: before a batch runs, ``due_keys`` with its latest event time names the pane
    records its close reads (append mode); the close reads no other record but the batch's own keys. Update
    mode deletes due records unread: none are named."""
    op = Aggregation(
        ["g"], [Agg("s", "sum", "x")], event_time="t", window="10s", slide="2s", watermark_delay="3s", output_mode=mode
    )
    reads: list[list[bytes]] = []
    real = view.get_many
    monkeypatch.setattr(view, "get_many", lambda keys, ts=0: reads.append(list(keys)) or real(keys, ts))
    rng = random.Random(7)
    named_total = 0
    for batch in range(20):
        events = [(batch * 3 * S + rng.randint(0, 3 * S), rng.randint(0, 40), 1.0) for _ in range(rng.randint(1, 15))]
        due, timers = op.due_keys(view, max(t for t, _, _ in events))
        assert len(due) == len(set(due)) == len(timers) and all(
            t > op.watermark.at_us for t in timers
        )  # not closed yet
        reads.clear()
        apply_then_idle(op, pane_deltas(events, 2 * S), view)
        view.freeze(batch)
        own = set(reads[0]) if reads else set()
        closed = set(reads[1]) if len(reads) > 1 else set()
        assert set(due) <= closed and closed <= set(due) | own
        named_total += len(due)
    assert (named_total > 0) == (mode == "append")
