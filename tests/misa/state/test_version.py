"""A batch's version lifecycle: the normal path, and every wrong transition refused."""

from typing import Callable

import pytest

from misa.exceptions import LifecycleError
from misa.state.commit_buffer import CommitBuffer
from misa.state.store import StateStore
from misa.state.version import BatchVersion, Phase
from misa.state.view import StateView


def at(phase: Phase) -> BatchVersion:
    """A version of number 3 moved along the normal path up to ``phase`` (FAILED: failed while pending)."""
    version = BatchVersion()
    steps: list[Callable[[], None]] = [
        lambda: version.freeze(CommitBuffer(3, {b"k": b"v"})),
        version.hand_over,
        version.applied,
        version.durable,
    ]
    path = [Phase.FROZEN, Phase.PENDING, Phase.APPLIED, Phase.DURABLE]
    for step, reached in zip(steps, path):
        if version.phase == phase or (phase == Phase.FAILED and version.phase == Phase.PENDING):
            break
        step()
        assert version.phase == reached
    if phase == Phase.FAILED:
        version.fail()
    assert version.phase == phase
    return version


def test_the_normal_path_runs_open_to_durable_and_the_buffer_is_read_until_applied():
    version = BatchVersion()
    assert version.phase == Phase.OPEN and not version.buffered
    buffer = CommitBuffer(7, {b"a": b"1", b"b": None}, ((b"c", b"d"),))
    version.freeze(buffer)
    assert version.phase == Phase.FROZEN and version.number == 7 and version.buffer is buffer and version.buffered
    version.hand_over()
    assert version.phase == Phase.PENDING and version.buffered
    version.applied()
    assert version.phase == Phase.APPLIED and not version.buffered
    version.durable()
    assert version.phase == Phase.DURABLE and not version.buffered


def test_a_failure_keeps_the_buffer_read_only_while_rocksdb_lacks_it():
    assert at(Phase.FAILED).buffered  # failed while pending
    after_apply = at(Phase.APPLIED)
    after_apply.fail()
    assert after_apply.phase == Phase.FAILED and not after_apply.buffered


def test_an_open_version_has_no_number_or_buffer():
    with pytest.raises(LifecycleError, match="open version has no number"):
        _ = BatchVersion().number
    with pytest.raises(LifecycleError, match="open version has no commit buffer"):
        _ = BatchVersion().buffer


MOVES: dict[str, Callable[[BatchVersion], None]] = {
    "freeze": lambda v: v.freeze(CommitBuffer(3, {})),
    "hand over": BatchVersion.hand_over,
    "mark applied": BatchVersion.applied,
    "mark durable": BatchVersion.durable,
    "fail": BatchVersion.fail,
}
ALLOWED = {
    ("freeze", Phase.OPEN),
    ("hand over", Phase.FROZEN),
    ("mark applied", Phase.PENDING),
    ("mark durable", Phase.APPLIED),
    ("fail", Phase.PENDING),
    ("fail", Phase.APPLIED),
}
WRONG = [(move, phase) for move in MOVES for phase in Phase if (move, phase) not in ALLOWED]


@pytest.mark.parametrize("move,phase", WRONG, ids=[f"{m}-when-{p}" for m, p in WRONG])
def test_every_wrong_transition_raises_and_changes_nothing(move, phase):
    """E.g. freezing twice, applying twice, durable before applied, failing a durable version."""
    version = at(phase)
    with pytest.raises(LifecycleError, match=rf"cannot {move} .*: it is {phase}, not "):
        MOVES[move](version)
    assert version.phase == phase


def test_the_view_reads_a_frozen_version_until_it_is_applied(config, tmp_path):
    """Freeze registers the buffer with the view itself; applied (by whoever applies) ends the reads of it."""
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as store:
        view = StateView(store)
        view.put_many([b"k"], [b"v0"])
        version = view.freeze(0)
        assert version.phase == Phase.FROZEN and view.get_many([b"k"]) == [b"v0"]  # from the buffer
        with pytest.raises(LifecycleError, match="cannot mark applied version 0: it is frozen"):
            version.applied()  # not handed over to a commit
        version.hand_over()
        version.applied()  # RocksDB never got it here: reads now miss it
        assert view.get_many([b"k"]) == [None]
        assert view.freeze(1).phase == Phase.FROZEN  # the next batch wrote into a new open version
