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
