"""``spark.misa.prefetch.enabled=auto``: its decisions on synthetic metrics (prefetch/auto.py)."""

from __future__ import annotations

from typing import Callable

import pytest

from prefetch.auto import OFF, ON, PROBE, AutoPolicy, AutoPrefetch, AutoState, Sample, decide

Regime = Callable[[bool, int], Sample]


def batch(
    on: bool, read_s: float, other_s: float = 0.3, rows: int = 7500, device_bytes: int | None = 2 << 20
) -> Sample:
    """A batch of ``rows`` rows: ``other_s`` of compute and merge, ``read_s`` of state read that fetched
    ``device_bytes`` from a device (None: not accounted)."""
    return Sample(on, rows, batch_s=other_s + read_s + 0.05, compute_s=other_s * 0.8, read_s=read_s,
                  apply_s=other_s * 0.2, device_bytes=device_bytes)  # fmt: skip


def run(regime: Regime, batches: int, policy: AutoPolicy = AutoPolicy()) -> tuple[list[bool], list[dict]]:
    """Drive auto over ``batches`` batches of ``regime``; whether each batch prefetched, and its records."""
    auto = AutoPrefetch(policy)
    ran, records = [], []
    for i in range(batches):
        ran.append(auto.on)
        records.append(auto.observe(regime(auto.on, i)))
    return ran, records


def memory(on: bool, i: int) -> Sample:
    """The default regime (CM2, state in memory): reads 6 ms of a 0.47 s batch; the cache costs 10 ms."""
    return batch(on, 0.006, 0.41 + (0.01 if on else 0.0), device_bytes=0)


def slow_volume(on: bool, i: int) -> Sample:
    """State on a slow volume: reads 0.3 s without prefetching, 0.03 s with it."""
    return batch(on, 0.03 if on else 0.3)


def no_gain(on: bool, i: int) -> Sample:
    """Reads are a large share, but hints hide little of them and cost the cache's bookkeeping."""
    return batch(on, 0.19 if on else 0.2, 0.3 + (0.02 if on else 0.0))


def test_state_in_memory_stays_off_and_never_probes():
    ran, records = run(memory, 300)
    assert not any(ran)
    assert {r["phase"] for r in records} == {OFF}
    assert records[0]["reason"] == "reads cheap: 1.3% of the batch (< 10%)"
    assert records[0]["prefetching"] == "off" and records[0]["next"] == "off"


def test_reads_served_from_memory_never_start_a_probe_however_long_they_take():
    """LR2 at 28,000 records/s with its state in memory: 0.2 s of a 1 s batch reading, nothing from a device."""
    ran, records = run(lambda on, i: batch(on, 0.2, 0.75, rows=85_000, device_bytes=40 << 10), 200)
    assert not any(ran)
    assert records[0]["reason"] == "reads from memory: 20.0% of the batch, 40 KiB from a device (< 256 KiB)"
    assert {r["phase"] for r in records} == {OFF}


def test_without_device_accounting_the_read_share_alone_decides():
    ran, records = run(lambda on, i: batch(on, 0.03 if on else 0.3, device_bytes=None), 10)
    assert ran[:3] == [False] * 3 and all(ran[3:])
    assert records[2]["reason"] == "probe: reads 46.2% of the batch for 3 batches"


def test_slow_reads_are_probed_after_patience_and_prefetching_stays_on_where_it_pays():
    ran, records = run(slow_volume, 40)
    # 3 batches off that read 40 % of their time, a probe of 1 + 3 batches, then on for good
    assert ran[:3] == [False] * 3 and all(ran[3:])
    assert [r["reason"][:5] for r in records[:3]] == ["reads", "reads", "probe"]
    assert records[2]["reason"] == "probe: reads 46.2% of the batch for 3 batches"
    assert [r["phase"] for r in records[3:7]] == [PROBE, PROBE, PROBE, ON]
    assert records[6]["reason"].startswith("probe: prefetching pays (cost 0.55x off)")  # 0.33 s of work, not 0.6
    assert records[6]["ratio"] == pytest.approx(0.55)
    assert {r["phase"] for r in records[7:]} == {ON}


def test_a_probe_that_does_not_pay_is_retried_later_and_later():
    ran, records = run(no_gain, 120)
    probes = [i for i in range(1, len(ran)) if ran[i] and not ran[i - 1]]
    # first after 3 batches; each failed probe (4 batches) waits 20, then 40 batches (+3 of patience)
    assert probes == [3, 3 + 4 + 20, 3 + 4 + 20 + 4 + 40]
    assert sum(ran) == 12
    failed = records[6]
    assert failed["next"] == "off" and failed["reason"].startswith("probe: prefetching does not pay (cost 1.0")
    assert failed["reason"].endswith("next probe in 20")


def test_reads_that_flicker_around_the_threshold_never_start_a_probe():
    def flicker(on: bool, i: int) -> Sample:
        return batch(on, 0.3 if i % 3 else 0.01)

    ran, _ = run(flicker, 60)
    assert not any(ran)


def test_prefetching_is_turned_off_only_after_patience_batches_cost_more():
    def worsens(on: bool, i: int) -> Sample:
        if i in (15, 17):  # two noisy batches, not in a row: no switch
            return batch(on, 0.5)
        return slow_volume(on, i) if i < 25 else batch(on, 0.35 if on else 0.3)  # later prefetching costs more

    ran, records = run(worsens, 40)
    assert all(ran[7:28]) and not any(ran[28:])
    assert records[27]["reason"].startswith("prefetching costs more than off for 3 batches")


def test_a_recheck_runs_one_batch_off_and_keeps_prefetching_where_it_still_pays():
    policy = AutoPolicy(recheck_every=10)
    ran, records = run(slow_volume, 30, policy)
    first_on = ran.index(True)
    assert ran[first_on + 4 + 10] is False  # 4 probe batches, 10 on, then one batch off
    assert all(ran[first_on + 4 + 11 : first_on + 4 + 21])
    assert records[first_on + 4 + 10]["reason"].startswith("recheck: prefetching still pays (cost 0.")
    assert records[first_on + 4 + 11]["reason"] == "on: warming the cache"  # its cache is cold again


def test_a_recheck_turns_prefetching_off_when_the_state_moved_into_memory():
    def shrinks(on: bool, i: int) -> Sample:
        return slow_volume(on, i) if i < 15 else memory(on, i)

    ran, records = run(shrinks, 40, AutoPolicy(recheck_every=10))
    recheck = ran.index(True) + 4 + 10
    assert not any(ran[recheck:])
    assert records[recheck]["reason"].startswith("recheck without prefetching: reads cheap: 1.3% of the batch")


def test_a_recheck_turns_prefetching_off_when_off_costs_less():
    def cheaper_off(on: bool, i: int) -> Sample:
        return slow_volume(on, i) if i < 15 else batch(on, 0.25 if on else 0.2)

    ran, records = run(cheaper_off, 40, AutoPolicy(recheck_every=10))
    recheck = ran.index(True) + 4 + 10
    assert ran[recheck - 1] and not any(ran[recheck : recheck + 20])  # then a probe again: reads are 40 %
    assert records[recheck]["reason"].startswith("recheck: off is cheaper (prefetching costs 1.10x off)")


def test_batches_without_rows_change_nothing():
    state = AutoState(PROBE, left=2)
    empty = Sample(True, 0, batch_s=0.01)
    decision = decide(state, [batch(False, 0.3), empty])
    assert decision.state == state and decision.reason == "no rows: nothing measured"
    auto = AutoPrefetch()
    assert auto.observe(empty)["cost_us_per_row"] is None


def test_a_probe_without_a_measurement_of_off_does_not_keep_prefetching():
    """After a restart mid-probe nothing off was measured: no ratio, so prefetching goes off."""
    history = [batch(True, 0.03) for _ in range(4)]
    decision = decide(AutoState(PROBE, left=1), history)
    assert not decision.on and decision.ratio is None and "cost unmeasured off" in decision.reason


@pytest.mark.parametrize(
    "kwargs", [{"min_read_share": 1.5}, {"margin": 1.0}, {"patience": 0}, {"window": 0}, {"min_device_bytes": -1}]
)
def test_invalid_policies_are_refused(kwargs):
    with pytest.raises(ValueError):
        AutoPolicy(**kwargs)


def test_deciding_is_cheap():
    """The decision runs once per batch on the driver: far below a millisecond."""
    import time

    auto = AutoPrefetch()
    for i in range(64):
        auto.observe(slow_volume(auto.on, i))
    started = time.perf_counter()
    for i in range(1000):
        auto.observe(slow_volume(auto.on, i))
    assert (time.perf_counter() - started) / 1000 < 0.001
