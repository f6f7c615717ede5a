"""The state-access harness: workloads, and every cache policy leaving exactly the same state."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack

import numpy as np
import pytest

from bench import state as bench_state
from bench.state import POLICIES, replay
from bench.state_workloads import KeyStream, StateWorkload
from misa.cli import main
from misa.config import MisaConfig


def args(**overrides) -> argparse.Namespace:
    values = dict(
        workload="tumbling",
        keys="zipf",
        key_space=3000,
        batches=25,
        warmup=3,
        batch_records=400,
        seconds_per_batch=5.0,
        compute_ms=1.0,
        cache_bytes="12k",
        skew=1.0,
        seed=3,
        window_s=60,
        slide_s=20,
    )
    values.update(overrides)
    return argparse.Namespace(**values)


def test_zipf_and_hotspot_are_skewed():
    rng = np.random.default_rng(0)
    zipf = KeyStream("zipf", 10_000, rng).draw(50_000)
    hot = KeyStream("hotspot", 10_000, rng, hot_fraction=0.01, hot_probability=0.8).draw(50_000)
    top = lambda ids: np.sort(np.bincount(ids.astype(np.int64)))[::-1]  # noqa: E731
    assert top(zipf)[0] > 50 * 50_000 / 10_000  # the hottest key is far above the uniform share
    assert top(hot)[:100].sum() / 50_000 == pytest.approx(0.8, abs=0.03)
    with pytest.raises(ValueError, match="key distribution"):
        KeyStream("uniformish", 10, rng)


def test_sliding_windows_name_every_window_of_a_record():
    rng = np.random.default_rng(0)
    workload = StateWorkload("sliding", KeyStream("zipf", 100, rng), 100, 50, 1.0, rng)
    batch = next(workload.batches(1))
    ends = {int.from_bytes(k[:8], "big") for k in batch.keys}
    start = workload.start_us
    assert ends == {start + 100_000_000, start + 200_000_000, start + 300_000_000}  # 300 s windows sliding 100 s
    assert batch.close_before == (start + 1_000_001).to_bytes(8, "big")
    assert all(start <= t < start + 1_000_000 for t in batch.ts)
    short = StateWorkload("sliding", KeyStream("zipf", 100, rng), 100, 50, 1.0, rng, window_s=60, slide_s=30)
    assert {int.from_bytes(k[:8], "big") - start for k in next(short.batches(1)).keys} == {30_000_000, 60_000_000}
    with pytest.raises(ValueError, match="multiple of the slide"):
        StateWorkload("sliding", KeyStream("zipf", 100, rng), 100, 50, 1.0, rng, window_s=60, slide_s=25)


@pytest.mark.parametrize("workload", ["aggregation", "tumbling", "interval-join"])
def test_every_policy_leaves_the_same_state(tmp_path, workload):
    """Small cache, so entries (dirty ones too) are evicted: the state must not depend on the policy."""
    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2"})
    a = args(workload=workload)
    with ExitStack() as stack:
        stores, state_keys = bench_state.open_stores(config, tmp_path, POLICIES, bench_state.build_workload(a), stack)
        records = {r["policy"]: r for r in replay(stores, bench_state.build_workload(a), a, state_keys, 12 * 1024)}
        finals = {policy: list(store.scan()) for policy, store in stores.items()}
    assert len(finals["lru"]) > 0
    for policy in POLICIES:
        assert finals[policy] == finals["lru"], policy
        assert records[policy]["batches"] == 25
        assert records[policy]["state_to_cache"] >= 10 and records[policy]["state_keys_min"] > 0
        assert records[policy]["state_keys_mean"] == records["lru"]["state_keys_mean"]  # counted, the same state
    assert 0 < records["tac"]["hit_ratio"] <= 1


def test_cli_prints_one_json_object_per_policy(tmp_path, capsys):
    interval = sys.getswitchinterval()
    code = main(
        [
            "bench",
            "state",
            "--workload",
            "aggregation",
            "--keys",
            "hotspot",
            "--policy",
            "tac,async",
            "--key-space",
            "2000",
            "--batches",
            "5",
            "--batch-records",
            "100",
            "--compute-ms",
            "1",
            "--cache-bytes",
            "16k",
            "--switch-interval",
            "1ms",
            "--work",
            str(tmp_path),
        ]
    )
    assert code == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["policy"] for r in rows] == ["tac", "async"]
    assert [r["switch_interval_ms"] for r in rows] == [1.0, 1.0]  # the same for every policy
    assert sys.getswitchinterval() == interval  # restored after the run
    assert all(set(r["read_ms"]) == {"p50", "p99", "p99.9"} and r["throughput_rps"] > 0 for r in rows)
    assert main(["bench", "state", "--policy", "fifo"]) == 2
    assert main(["bench", "state", "--workload", "sliding", "--window-s", "60", "--slide-s", "25"]) == 2
    assert "--window-s/--slide-s: window 60 s must be a positive multiple of the slide 25 s" in capsys.readouterr().err
    assert main(["bench", "state", "--cache-bytes", "lots"]) == 2
    assert "--cache-bytes 'lots': use a size such as 1m" in capsys.readouterr().err
    assert main(["bench", "state", "--switch-interval", "0ms"]) == 2
    assert "--switch-interval: spark.misa.python.switchInterval='0ms' is out of range" in capsys.readouterr().err


def test_switch_interval_is_set_inside_the_block_and_restored_after():
    from misa.runtime.process import switch_interval

    before = sys.getswitchinterval()
    with switch_interval(0.0002):
        assert sys.getswitchinterval() == pytest.approx(0.0002)
    assert sys.getswitchinterval() == before


def test_gc_is_paused_inside_the_state_phase_and_restored_after():
    import gc

    from misa.runtime.process import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves the outer pause in place
    assert gc.isenabled()
