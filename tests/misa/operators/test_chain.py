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
