import subprocess
import sys
import time

import pytest

from common import failpoints
from common.errors import FailpointError


def test_raise_n_times_then_pass():
    failpoints.configure("dfs.put=raise(2)")
    for _ in range(2):
        with pytest.raises(FailpointError, match="dfs.put"):
            failpoints.hit("dfs.put")
    failpoints.hit("dfs.put")
    failpoints.hit("dfs.get")  # not enabled


def test_raise_always_and_off():
    failpoints.configure("dfs.get=raise;dfs.put=off")
    for _ in range(5):
        with pytest.raises(OSError):
            failpoints.hit("dfs.get")
    failpoints.hit("dfs.put")


def test_sleep():
    failpoints.configure("ckpt.after_flush=sleep(150)")
    started = time.monotonic()
    failpoints.hit("ckpt.after_flush")
    assert time.monotonic() - started >= 0.14


@pytest.mark.parametrize(
    "spec,message",
    [
        ("nope.point=raise", "unknown failpoint 'nope.point'"),
        ("dfs.put=explode", "bad action 'explode'"),
        ("dfs.put=sleep", "bad action 'sleep'"),
    ],
)
def test_bad_specs_are_named(spec, message):
    with pytest.raises(ValueError, match=message):
        failpoints.configure(spec)


def test_undeclared_point_is_a_programming_error():
    with pytest.raises(KeyError):
        failpoints.hit("not.declared")


def test_kill_ends_the_process_from_the_environment():
    code = "from common import failpoints; failpoints.hit('ckpt.after_upload'); print('survived')"
    done = subprocess.run(
        [sys.executable, "-c", code], env={"MISA_FAILPOINTS": "ckpt.after_upload=kill"}, capture_output=True, text=True
    )
    assert done.returncode == -9 and "survived" not in done.stdout


def test_kill_at_the_nth_hit():
    code = "from common import failpoints\nfor i in range(5):\n    print(i, flush=True); failpoints.hit('dfs.put')"
    done = subprocess.run(
        [sys.executable, "-c", code], env={"MISA_FAILPOINTS": "dfs.put=kill(3)"}, capture_output=True, text=True
    )
    assert done.returncode == -9 and done.stdout.split() == ["0", "1", "2"]


def test_a_kill_fires_once_among_the_processes_sharing_the_once_folder(tmp_path):
    """A state host that takes a killed host's place counts its hits from 0: with MISA_FAILPOINTS_ONCE the kill at
    the 3rd hit fires in the first process only."""
    code = "from common import failpoints\nfor i in range(5):\n    print(i, flush=True); failpoints.hit('dfs.put')"
    env = {"MISA_FAILPOINTS": "dfs.put=kill(3)", failpoints.ONCE_VAR: str(tmp_path)}
    first, second = (
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True) for _ in "ab"
    )
    assert first.returncode == -9 and first.stdout.split() == ["0", "1", "2"]
    assert second.returncode == 0 and second.stdout.split() == ["0", "1", "2", "3", "4"]
