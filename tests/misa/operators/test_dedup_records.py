"""``dropDuplicatesWithinWatermark``'s expiry records (:class:`misa.operators.dedup.Deduplicate`) against the per-key
timers they replaced (:mod:`per_key_dedup`): random batches of every key type, rows late, rows without event time and
keys repeating around their expiry, batches without data between; the same rows, late counts and remembered keys each
batch, with records of a few keys (many records, rewritten remainders) and of the default size, and a state the
per-key code wrote continued by the records code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from idle_runs import IdleBatchRun, row_reprs
from key_pools import KEY_TYPES, key_pool
from per_key_dedup import PerKeyDeduplicate

from misa.operators import dedup
from misa.operators.dedup import Deduplicate
from misa.state.keys import DEDUP_EXPIRIES, DEDUP_EXPIRY

SECOND = 1_000_000
TS = pa.timestamp("us", tz="UTC")


def _batch(rng: np.random.Generator, pools: dict[str, list], base_us: int, n: int) -> pa.Table:
    """``n`` rows keyed from ``pools`` (few keys, so that they repeat), event times over 6 s from ``base_us`` with
    some a few seconds late, and some without event time."""
    times = base_us + rng.integers(-6, 12, n) * (SECOND // 2)
    columns = {
        name: pa.array([pool[p] for p in rng.integers(0, len(pool), n)], KEY_TYPES[name.split("_")[0]])
        for name, pool in pools.items()
    }
    missing = rng.random(n) < 0.05
    columns["t"] = pa.array(times, TS, mask=missing)
    columns["v"] = pa.array(np.arange(n), pa.int64())
    return pa.table(columns)


def _operator(cls: type, keys: list[str]) -> Deduplicate:
    return cls(keys, event_time="t", watermark_delay="2s", within_watermark=True)


def _remembered(run: IdleBatchRun) -> list[tuple[bytes, bytes]]:
    """The remembered keys and their expiries (every key outside the timers' key spaces)."""
    return [(k, v) for k, v in run.view.scan(b"", b"\xff") if not k.startswith((DEDUP_EXPIRY, DEDUP_EXPIRIES))]


def _same_runs(tmp_path: Path, keys: list[str], seed: int, switch_at: int = 0) -> None:
    """Ten random batches through the records code and the per-key code: the same rows, late rows and remembered
    keys each batch. With ``switch_at``, the first run is the per-key code up to that batch, then the records code
    on its state."""
    rng = np.random.default_rng(seed)
    pools = {name: key_pool(name.split("_")[0], rng, 14) for name in keys}
    run = IdleBatchRun(tmp_path / "run", _operator(PerKeyDeduplicate if switch_at else Deduplicate, keys))
    per_key = IdleBatchRun(tmp_path / "per-key", _operator(PerKeyDeduplicate, keys), memory_tier=False)
    try:
        emitted = late = 0
        for n in range(10):
            if switch_at and n == switch_at:
                records = _operator(Deduplicate, keys)
                records.restore(run.operator.metadata())
                run.operator = records
            deltas = _batch(rng, pools, n * 3 * SECOND, int(rng.integers(1, 50)))
            (got, got_idle), (expected, expected_idle) = run.step(deltas), per_key.step(deltas)
            assert row_reprs(got.output.to_pylist() + got_idle.output.to_pylist()) == row_reprs(
                expected.output.to_pylist() + expected_idle.output.to_pylist()
            ), f"batch {n}"
            assert got.late_rows == expected.late_rows, f"batch {n}"
            assert _remembered(run) == _remembered(per_key), f"batch {n}"
            emitted, late = emitted + got.output.num_rows, late + got.late_rows
        assert emitted > 0 and late > 0 and run.memory_reads > 0
        if not switch_at:
            assert not run.view.scan(DEDUP_EXPIRY, DEDUP_EXPIRY + b"\xff"), "the records code wrote a per-key timer"
    finally:
        run.close()
        per_key.close()


@pytest.mark.parametrize("record_keys", [3, dedup.EXPIRY_RECORD_KEYS])
@pytest.mark.parametrize("keys", [["long"], ["string"], ["double"], ["timestamp"], ["string", "long_2"]])
def test_expiry_records_forget_the_keys_the_per_key_timers_forgot(tmp_path, monkeypatch, keys, record_keys):
    monkeypatch.setattr(dedup, "EXPIRY_RECORD_KEYS", record_keys)
    _same_runs(tmp_path, keys, seed=46 + len(keys) * 7 + record_keys)


@pytest.mark.parametrize("record_keys", [3, dedup.EXPIRY_RECORD_KEYS])
def test_a_state_the_per_key_timers_wrote_goes_on_with_expiry_records(tmp_path, monkeypatch, record_keys):
    monkeypatch.setattr(dedup, "EXPIRY_RECORD_KEYS", record_keys)
    _same_runs(tmp_path, ["string"], seed=4711, switch_at=4)
