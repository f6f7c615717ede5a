"""The generator of deployments (jobs/differential/deployments.py) draws every shape users deploy, including shapes
misa refuses; a fixed-seed slice runs against plain Spark here (`misa fuzz --deployments` runs more)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from jobs.differential import deployments as d
from jobs.differential.scenarios import run_scenario


def test_the_generator_draws_every_shape_within_200_seeds():
    drawn = Counter(tag for seed in range(200) for tag in d.random_deployment(seed).tags)
    shapes = {
        "source": d.SOURCES,
        "plan": d.PLANS,
        "stateful": d.STATEFUL,
        "key": d.KEYS,
        "aggregate": d.AGGREGATES,
        "trigger": d.TRIGGERS,
        "output_mode": d.MODES,
        "placement": ("driver", "executors"),
    }
    missing = [f"{name}:{value}" for name, values in shapes.items() for value in values if not drawn[f"{name}:{value}"]]
    assert not missing, f"never drawn: {missing}"
    assert drawn["rounds:1"] and drawn["rounds:3"]


def test_a_seed_draws_the_same_deployment():
    assert d.random_deployment(7) == d.random_deployment(7)
    assert d.random_deployment(7) != d.random_deployment(8)


# Seeds of the slice: a Python source with a backlog under a filter (a sliding window) and two streams unioned
# (session windows, restarts); each runs through both engines (the first with -m slow: the suite's time).
SLICE = (pytest.param(6, marks=pytest.mark.slow), 3)


@pytest.mark.parametrize("seed", SLICE)
def test_a_fixed_seed_slice_gives_sparks_rows_or_a_refusal_at_start(spark, tmp_path: Path, seed: int):
    deployment = d.random_deployment(seed)
    outcome = run_scenario(spark, deployment.scenario(), tmp_path)
    assert outcome.mismatch is None, f"{deployment.describe()}: {outcome.mismatch}"
