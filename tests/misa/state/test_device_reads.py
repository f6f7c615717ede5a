"""Device reads: ``/proc/self/io`` parsed, and a batch's state reads counted by the view.

Real RocksDB through a StateStore on tmp_path: reads with O_DIRECT reach the disk, reads of the
memtable do not. This is what prefetching ``auto`` reads to tell waits on a device from work in memory.
"""

from __future__ import annotations

import dataclasses
import random
import sys

import pytest
from state_helpers import key

from misa.config import MisaConfig
from misa.state.device_reads import device_bytes_read
from misa.state.store import StateStore
from misa.state.view import StateView

KEYS = 20_000


def test_read_bytes_is_parsed_from_the_accounting(tmp_path):
    io = tmp_path / "io"
    io.write_text("rchar: 6976\nwchar: 0\nsyscr: 10\nread_bytes: 1234567\nwrite_bytes: 0\n")
    assert device_bytes_read(str(io)) == 1234567


def test_a_system_without_the_accounting_gives_none(tmp_path):
    assert device_bytes_read(str(tmp_path / "absent")) is None
    (tmp_path / "io").write_text("rchar: 6976\n")
    assert device_bytes_read(str(tmp_path / "io")) is None


def _store(config: MisaConfig, tmp_path, direct: bool) -> StateStore:
    config = dataclasses.replace(config, rocksdb_direct_reads=direct)
    return StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}")


@pytest.mark.skipif(sys.platform != "linux", reason="the accounting is Linux's /proc/self/io")
def test_reads_that_reach_the_disk_are_counted_and_reads_from_memory_are_not(config, tmp_path):
    keys = [key(i) for i in range(KEYS)]
    values = [random.Random(i).randbytes(100) for i in range(KEYS)]  # incompressible: 2 MB of SST data
    with _store(config, tmp_path / "direct", direct=True) as store:
        store.write(list(zip(keys, values)))
        store.flush()  # into SST files, read with O_DIRECT below
        view = StateView(store)
        assert view.get_many(keys) == values
        on_disk = view.take_reads()
        view.close()
    with _store(config, tmp_path / "memory", direct=False) as store:
        store.write(list(zip(keys, values)))  # in the memtables
        view = StateView(store)
        assert view.get_many(keys) == values
        in_memory = view.take_reads()
        view.close()
    assert on_disk.device_bytes is not None and on_disk.device_bytes >= KEYS * 100 // 2  # most blocks read once
    assert in_memory.device_bytes is not None and in_memory.device_bytes < 64 * 1024
    assert on_disk.seconds > 0 and in_memory.seconds > 0
    assert view.take_reads().device_bytes == 0  # taking resets
