"""Starting the state workers: they never run the user's script again, and a worker that cannot start fails the
pool at once with one line that says so."""

import os
import pickle
import subprocess
import sys
import textwrap
import time

import pytest

from misa.exceptions import StateWorkerError
from misa.parallel.layout import partition_locations
from misa.parallel.pool import WorkerPool

UNGUARDED = """
    import os, sys
    from pyspark.sql import types as T
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from misa.config import MisaConfig
    from misa.operators.processor import StatefulProcessorOperator
    from misa.parallel.partitioned import PartitionedStore

    with open(sys.argv[1], "a") as runs:  # the script's top: Spark would start here
        runs.write(f"{os.getpid()}\\n")

    class Counter(StatefulProcessor):  # in __main__: the workers get it by value
        def init(self, handle):
            pass

        def handleInputRows(self, key, rows, timerValues):
            yield from ()

    config = MisaConfig.from_mapping({"spark.misa.state.shards": "2"})
    operator = StatefulProcessorOperator(Counter(), ["k"], T.StructType([T.StructField("k", T.StringType())]))
    store = PartitionedStore(config, operator, sys.argv[2], "file://" + sys.argv[3], 2)
    store.claim("query")
    print("newest durable:", store.checkpoints.newest_durable())
    store.close()
"""


def test_a_script_without_a_main_guard_starts_its_workers_and_its_top_runs_once(tmp_path):
    """multiprocessing's spawn would run the script's top again in every worker (which then starts Spark, and
    workers of its own, and dies); the workers import misa only."""
    script, runs = tmp_path / "job.py", tmp_path / "runs"
    script.write_text(textwrap.dedent(UNGUARDED))
    args = [sys.executable, str(script), str(runs), str(tmp_path / "state"), str(tmp_path / "dfs")]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["newest durable: None"]
    assert len(runs.read_text().split()) == 1  # the script's own process only


class _ExitWhenLoaded:
    """An operator whose copy ends the worker process that unpickles it (as a bootstrap failure would)."""

    def __reduce__(self):
        return os._exit, (3,)


def test_a_worker_that_dies_while_starting_fails_the_pool_at_once_in_one_line(config, tmp_path):
    locations = partition_locations(tmp_path / "state", f"file://{tmp_path / 'dfs'}", 2)
    started = time.monotonic()
    with pytest.raises(StateWorkerError) as failed:
        WorkerPool(config, locations, pickle.dumps(_ExitWhenLoaded()))
    assert time.monotonic() - started < 10
    message = str(failed.value)
    assert "\n" not in message and "Restart" not in message, message
    assert message.startswith("state worker 0 ") and "exited (3) while starting" in message, message
