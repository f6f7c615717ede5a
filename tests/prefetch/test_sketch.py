"""The Count-Min sketch (saturation, aging, hot keys) and the key hash."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from prefetch.sketch import CountMinSketch, hash_keys

ROOT = Path(__file__).resolve().parents[2]


def ids(values: list[int] | np.ndarray) -> np.ndarray:
    return hash_keys([pa.array(np.asarray(values, np.int64))])


def test_zipf_stream_finds_the_top_keys_hot_and_not_the_rare_ones() -> None:
    rng = np.random.default_rng(7)
    stream = rng.zipf(1.3, 200_000)
    stream = stream[stream <= 50_000]
    keys, counts = np.unique(stream, return_counts=True)
    sketch = CountMinSketch(4, 8192, threshold=64, aging_records=10**9)
    for chunk in np.array_split(stream, 20):  # several adds, one record each
        sketch.add(ids(chunk))

    hot = sketch.is_hot(ids(keys))
    top = keys[np.argsort(-counts)[:20]]
    assert sketch.is_hot(ids(top)).all()
    rare = counts <= 5
    assert rare.sum() > 1000
    assert not hot[rare].any()
    assert hot[counts > 64].all()  # no aging: true counts above the threshold are never missed
    assert hot.sum() < 1.2 * (counts > 64).sum()


def test_estimates_never_under_count_before_aging() -> None:
    rng = np.random.default_rng(3)
    stream = rng.integers(0, 2000, 6000)
    sketch = CountMinSketch(3, 256, threshold=10, aging_records=10**9)
    sketch.add(ids(stream[:3000]))
    keys, counts = np.unique(stream[3000:], return_counts=True)
    sketch.add(ids(keys), counts)  # the second half as per-key counts
    keys, counts = np.unique(stream, return_counts=True)
    estimates = sketch.estimate(ids(keys))
    assert estimates.max() < 255  # no counter saturated, so the CM bound must hold
    assert (estimates >= counts).all()
    assert (estimates > counts).any()  # collisions in a narrow sketch over-count


def test_counters_saturate_and_never_wrap() -> None:
    sketch = CountMinSketch(2, 64, threshold=100, aging_records=10**9)
    key = ids([42])
    for _ in range(300):
        sketch.add(key)
    assert sketch.table.dtype == np.uint8
    assert sketch.estimate(key)[0] == 255
    sketch.add(key, np.array([1000]))
    assert sketch.estimate(key)[0] == 255
    assert sketch.table.max() == 255
    assert sketch.is_hot(key)[0]

    wide = CountMinSketch(2, 64, threshold=100, aging_records=10**9, dtype=np.uint16)
    wide.add(key, np.array([1000]))
    assert wide.estimate(key)[0] == 1000


def test_aging_halves_counters_and_cools_keys_that_stop_arriving() -> None:
    sketch = CountMinSketch(4, 1024, threshold=10, aging_records=1000)
    key, other = ids([1]), ids([2])
    sketch.add(key, np.array([50]))
    assert sketch.estimate(key)[0] == 50 and sketch.is_hot(key)[0]

    sketch.add(other, np.array([950]))  # the 1000th record: one aging
    assert sketch.estimate(key)[0] == 25 and sketch.records == 0
    assert sketch.is_hot(key)[0]

    sketch.add(other, np.array([2300]))  # two more agings in one add, 300 records carried over
    assert sketch.estimate(key)[0] == 6 and sketch.records == 300
    assert not sketch.is_hot(key)[0]


def test_hash_keys_is_deterministic_within_and_across_processes() -> None:
    columns = [pa.array([1, 2, None, 2**40]), pa.chunked_array([["a", None], ["é", "a"]])]
    first = hash_keys(columns)
    assert first.dtype == np.uint64
    assert np.array_equal(first, hash_keys(columns))

    script = (
        "import pyarrow as pa; from prefetch.sketch import hash_keys; "
        "print(*hash_keys([pa.array([1, 2, None, 2**40]), pa.array(['a', None, 'é', 'a'])]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    other = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert [int(h) for h in other.stdout.split()] == first.tolist()


def test_hash_keys_distinguishes_keys_and_matches_equal_ones() -> None:
    many = ids(np.arange(100_000))
    assert len(np.unique(many)) == 100_000

    strings = hash_keys([pa.array(["x", "y", "", None, "x", None])])
    assert strings[0] == strings[4] and strings[3] == strings[5]
    assert len({int(h) for h in strings[:4]}) == 4  # "x", "y", "" and null all differ

    ints = hash_keys([pa.array([0, None, 7], pa.int32())])
    assert ints[0] != ints[1]  # null is not 0
    assert np.array_equal(ints, hash_keys([pa.array([0, None, 7], pa.int64())]))  # by value, any width

    a, b = pa.array([1, 2, 1, 2]), pa.array(["p", "q", "p", "p"])
    pairs = hash_keys([a, b])
    assert pairs[0] == pairs[2]
    assert len({int(h) for h in pairs[[0, 1, 3]]}) == 3
    assert not np.array_equal(hash_keys([a, a]), hash_keys([a]))
    swapped = hash_keys([pa.array([1, 2]), pa.array([2, 1])])
    assert swapped[0] != swapped[1]  # column order matters


def test_pickle_round_trip_and_copy_keep_counters_independently() -> None:
    sketch = CountMinSketch(3, 128, threshold=5, aging_records=500)
    sketch.add(ids(np.arange(40)), np.arange(40))
    restored = pickle.loads(pickle.dumps(sketch))
    assert np.array_equal(restored.table, sketch.table)
    assert (restored.depth, restored.width, restored.threshold, restored.aging_records, restored.records) == (
        sketch.depth,
        sketch.width,
        sketch.threshold,
        sketch.aging_records,
        sketch.records,
    )
    assert np.array_equal(restored.is_hot(ids(np.arange(40))), sketch.is_hot(ids(np.arange(40))))

    snapshot = sketch.copy()
    sketch.add(ids([0]), np.array([100]))
    assert snapshot.estimate(ids([0]))[0] < sketch.estimate(ids([0]))[0]


def test_width_is_rounded_up_to_a_power_of_two() -> None:
    assert CountMinSketch(2, 1000).width == 1024
    assert CountMinSketch(2, 1024).table.shape == (2, 1024)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"depth": 0}, "depth"),
        ({"width": 0}, "width"),
        ({"threshold": -1}, "threshold"),
        ({"threshold": 255}, "threshold"),
        ({"aging_records": 0}, "aging_records"),
        ({"dtype": np.int8}, "dtype"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        CountMinSketch(**kwargs)


def test_bad_add_arguments_raise() -> None:
    sketch = CountMinSketch(2, 64)
    with pytest.raises(ValueError, match="counts"):
        sketch.add(ids([1, 2]), np.array([1]))
    with pytest.raises(ValueError, match="counts"):
        sketch.add(ids([1]), np.array([-1]))
    with pytest.raises(ValueError, match="hashes"):
        sketch.add(np.array([1.5]))


def test_booleans_hash_by_value_with_nulls_and_no_columns_give_one_hash():
    flags = hash_keys([pa.array([True, False, None, True])])
    assert flags[0] == flags[3] and len(set(flags.tolist())) == 3
    assert np.array_equal(flags[:2], hash_keys([pa.array([1, 0], pa.int8())]))  # as the integers 1 and 0
    assert len(set(hash_keys([], rows=3).tolist())) == 1
