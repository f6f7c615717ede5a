"""The parts of a chain of stateful operators that need no Spark: each operator's key range in the one state, and
the watermark an operator takes from the one below it (misa.operators.chain)."""

from __future__ import annotations

import pytest

from misa.operators.chain import CHAIN_KEY, OperatorChain, PrefixedView
from misa.operators.watermark import PropagatedWatermark
from misa.state.store import StateStore
from misa.state.view import StateView


@pytest.fixture
def view(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        yield StateView(store)


def test_each_operator_reads_writes_and_deletes_only_its_own_keys(view):
    below, above = PrefixedView(view, CHAIN_KEY + b"\x00"), PrefixedView(view, CHAIN_KEY + b"\x01")
    below.put_many([b"a", b"b"], [b"1", b"2"])
    above.put_many([b"a", b"c"], [b"9", b"8"])
    assert below.get_many([b"a", b"c"]) == [b"1", None] and above.get_many([b"a", b"b"]) == [b"9", None]
    assert below.scan(b"", b"\xff") == [(b"a", b"1"), (b"b", b"2")]
    below.delete_range(b"", b"\xff")
    assert below.scan(b"", b"\xff") == [] and above.scan(b"", b"\xff") == [(b"a", b"9"), (b"c", b"8")]
    assert [k for k, _ in view.scan(b"", b"\xff\xff")] == [CHAIN_KEY + b"\x01a", CHAIN_KEY + b"\x01c"]


def test_a_propagated_watermark_moves_with_the_one_below_not_with_its_rows():
    watermark = PropagatedWatermark(5000)
    watermark.observe(10**12)  # its own rows move nothing
    assert watermark.begin_batch() == (0, 0) and not watermark.moves()
    watermark.next_us = 7_000_000  # the operator below evicted with 7 s
    assert watermark.moves() and watermark.begin_batch() == (0, 7_000_000)
    watermark.next_us = 9_000_000  # a batch without data
    assert watermark.advance() == 9_000_000 and watermark.advance() is None
    restored = PropagatedWatermark(5000)
    restored.restore(watermark.metadata())
    assert restored.begin_batch() == (9_000_000, 9_000_000)


def test_the_operators_above_the_first_judge_by_a_propagated_watermark():
    from pyspark.sql import types as T

    from misa.operators.aggregation import Agg, Aggregation
    from misa.operators.chain import Link
    from misa.operators.dedup import Deduplicate

    first = Deduplicate(["k"], event_time="t", watermark_delay="5 seconds", event_time_key=False)
    above = Aggregation(["k"], [Agg("n", "count", "*")], "t", "10 seconds", watermark_delay="5 seconds")
    chain = OperatorChain(first, [Link(above, lambda table: None, T.StructType())])  # type: ignore[arg-type]
    assert isinstance(above.watermark, PropagatedWatermark) and chain.event_watermark() is first.watermark
    chain.restore({})
    assert [part["watermark_us"] for part in chain.metadata()["chain"]] == [0, 0]


def test_a_chains_deltas_part_into_the_lowest_operators_and_the_carried_rows():
    import pyarrow as pa

    from misa.operators.chain import CARRIED, _carried_apart

    carried = pa.array([None, {"_side": 1, "_k0": "x"}, None, {"_side": 1, "_k0": None}])
    deltas = pa.table({"k": ["a", None, "b", None], "n": [1, None, 2, None], CARRIED: carried})
    own, rows = _carried_apart(deltas)
    assert own.to_pylist() == [{"k": "a", "n": 1}, {"k": "b", "n": 2}]
    assert rows is not None and rows.to_pylist() == [{"_side": 1, "_k0": "x"}, {"_side": 1, "_k0": None}]
    assert _carried_apart(own) == (own, None)  # a chain that carries nothing
    none = _carried_apart(deltas.slice(0, 1))[1]
    assert none is not None and none.num_rows == 0 and none.column_names == ["_side", "_k0"]  # the join still runs


def test_a_join_above_another_operation_moves_with_the_watermark_below_not_with_its_rows():
    from pyspark.sql import types as T

    from misa.operators.chain import Link
    from misa.operators.dedup import Deduplicate
    from misa.operators.stream_join import JoinSide, StreamJoin
    from misa.operators.watermark import PropagatedInputsWatermark

    first = Deduplicate(["k"], event_time="t", watermark_delay="5 seconds", event_time_key=True)
    join = StreamJoin(1, JoinSide("l1", 5000, state_offset_ms=0), JoinSide("r1", 10_000, state_offset_ms=0))
    OperatorChain(first, [Link(join, lambda table: None, T.StructType(), carries=True)])  # type: ignore[arg-type]
    watermark = join.watermark
    assert isinstance(watermark, PropagatedInputsWatermark)
    watermark.observe_input(1, 10**12)  # the carried side's rows move nothing
    assert watermark.begin_batch() == (0, 0) and not watermark.moves()
    watermark.next_us = 7_000_000  # the deduplication's output watermark
    assert watermark.moves() and watermark.begin_batch() == (0, 7_000_000)
    restored = PropagatedInputsWatermark((5000, 10_000))
    restored.restore(watermark.metadata())
    assert restored.begin_batch() == (7_000_000, 7_000_000)
