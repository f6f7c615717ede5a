"""The state version kept continuous with Spark's batch ids (:mod:`misa.runtime.continuity`), on fakes of the job's
parts: no Spark, no RocksDB."""

from __future__ import annotations

from typing import Any

import pytest

from checkpoint.exceptions import CorruptCheckpointError
from misa.exceptions import RecoveryError
from misa.runtime.continuity import StateContinuity
from misa.runtime.job_parts import JobParts


class _Calls:
    """Records every method called on it, in one list shared by the fakes, with the arguments."""

    def __init__(self, log: list, name: str, **answers: Any):
        self._log, self._name, self._answers = log, name, answers

    def __getattr__(self, method: str):
        def call(*args):
            self._log.append((f"{self._name}.{method}", *args))
            return self._answers.get(method)

        return call


class _Store:
    def __init__(self, log: list, version: int, durable: int | None, problems: list[str]):
        self.version, self.operator, self.metadata, self.locations = version, None, {"at": version}, "the locations"
        self.checkpoints = _Calls(log, "checkpoints", newest_durable=durable)
        self._log, self._problems = log, problems

    def restore_problems(self, version: int) -> list[str]:
        return self._problems

    def load(self, version: int) -> None:
        self._log.append(("store.load", version))
        self.version, self.metadata = version, {"at": version}


def _continuity(version: int, durable: int | None = None, problems: tuple[str, ...] = ()) -> tuple[Any, list]:
    log: list = []
    store = _Store(log, version, durable, list(problems))
    parts = JobParts(
        operator=_Calls(log, "operator"),  # type: ignore[arg-type]
        dfs_url="file:///dfs",
        processes=1,
        on_executors=False,
        partitioned=False,
        store=store,
        view=_Calls(log, "view"),
        hints=None,
        auto=None,
        spark_checkpoint=None,  # type: ignore[arg-type]
        mirror=None,
        no_data=None,  # type: ignore[arg-type]
        controller=_Calls(log, "controller"),
        merger=None,
    )
    return StateContinuity(parts, "file:///ckpt"), log  # type: ignore[arg-type]


def test_the_next_batch_runs_on_the_state_as_it_is_and_the_first_checks_the_claim():
    continuity, log = _continuity(3)
    continuity.expect_first_batch()
    assert continuity.check(4) is True and log == [("checkpoints.check_owner",)]
    continuity.committed(4)
    assert continuity.check(5) is False and continuity.version == 4 and len(log) == 1


def test_a_replayed_batch_rewinds_to_the_version_before_it():
    continuity, log = _continuity(5)
    assert continuity.check(4) is False
    assert log == [
        ("controller.drain",),  # the pending commits first
        ("checkpoints.forget_after", 3),  # newer versions forgotten before the replay rebuilds them
        ("store.load", 3),
        ("operator.restore", {"at": 3}),
        ("view.reset",),
        ("controller.loaded", 3),
    ]
    assert continuity.version == 3


def test_a_replay_onto_a_damaged_version_fails_before_anything_is_forgotten():
    continuity, log = _continuity(5, problems=("shard 0: a missing file",))
    with pytest.raises(CorruptCheckpointError, match="batch 4 is replayed but version 3 cannot be restored"):
        continuity.check(4)
    assert log == [("controller.drain",)] and continuity.version == 5


def test_a_gap_fails_the_batch_unless_its_version_became_durable_since_the_start():
    continuity, log = _continuity(2, durable=4)
    with pytest.raises(RecoveryError, match="Spark runs batch 5 .* the state is at version 2"):
        continuity.check(5)  # not the first batch: another driver ran 3 and 4
    assert log == [("checkpoints.newest_durable",)]
    continuity, log = _continuity(2, durable=4)
    continuity.expect_first_batch()
    assert continuity.check(5) is True and continuity.version == 4
    assert ("store.load", 4) in log and log[-1] == ("controller.loaded", 4)
