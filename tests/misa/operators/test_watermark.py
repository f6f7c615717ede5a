"""The watermark models follow Spark's own watermark when the runtime gives it (misa.operators.watermark)."""

from __future__ import annotations

from misa.operators.watermark import EventTimeWatermark, InputsWatermark


def test_a_followed_watermark_is_sparks_for_one_batch_then_the_model_again():
    watermark = EventTimeWatermark(delay_ms=1_000)
    watermark.observe(10_000_000)  # the rows the operator saw: the model says 9 s
    watermark.follow(12_000_000)  # Spark's node also saw a row at 13 s that a join below the operator dropped
    assert watermark.begin_batch() == (0, 12_000_000)
    watermark.observe(11_000_000)
    assert watermark.begin_batch() == (12_000_000, 12_000_000)  # the model (10 s) never takes it back


def test_a_followed_global_watermark_of_several_inputs_is_sparks():
    watermark = InputsWatermark((0, 0))
    watermark.observe_input(0, 20_000_000)  # the other input has no rows yet: the min policy holds the model at 0
    watermark.follow(5_000_000)
    assert watermark.advance() == 5_000_000 and watermark.at_us == 5_000_000
    assert watermark.advance() is None  # the model alone: still 0, and a watermark never goes back


def test_inputs_of_one_withwatermark_node_share_its_latest_watermark_under_either_policy():
    """A self-join's sides or a union's branches of one stream read one node: Spark's tracker keeps one watermark
    for it (by its id), the latest of its occurrences'; another node still counts for the policy."""
    for policy in ("min", "max"):
        one_node = InputsWatermark((0, 0), policy, nodes=(0, 0))
        one_node.observe_input(0, 20_000_000)
        one_node.observe_input(1, 5_000_000)
        assert one_node.advance() == 20_000_000
    two_nodes = InputsWatermark((0, 0, 0), "min", nodes=(0, 0, 1))
    two_nodes.observe_input(0, 20_000_000)
    assert two_nodes.advance() is None  # node 1 has had no rows: 0
    two_nodes.observe_input(2, 8_000_000)
    assert two_nodes.advance() == 8_000_000
