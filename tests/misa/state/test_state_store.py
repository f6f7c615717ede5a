import numpy as np
import pytest
from state_helpers import contents, fill, key

from misa.config import MisaConfig
from misa.exceptions import ConfigError
from misa.state.store import EMPTY_VERSION, StateStore


@pytest.fixture
def store(config, tmp_path):
    with StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}") as s:
        yield s


def test_put_get_delete_and_multiget(store):
    data = fill(store, 1000, seed=1)
    assert store.get(key(5)) == data[key(5)]
    wanted = [key(3), key(5000), key(999), key(0)]
    assert store.get_many(wanted) == [data[key(3)], None, data[key(999)], data[key(0)]]
    store.write([(key(3), None), (key(4), b"new")])
    assert store.get_many([key(3), key(4)]) == [None, b"new"]


@pytest.mark.parametrize("parallel", [True, False])
def test_a_multiget_gives_each_keys_value_in_order_across_shards(store, parallel):
    """Keys of every shard, repeated, missing, one key of a shard alone, and none: each one's value in place."""
    data = fill(store, 300, seed=3)
    wanted = [key(i) for i in (7, 7000, 7, 299, 0, 150, 8000, 42)] + [key(i) for i in range(100, 140)]
    assert store.get_many(wanted, parallel) == [data.get(k) for k in wanted]
    for one in (key(5), key(9999)):
        assert store.get_many([one], parallel) == [data.get(one)]
    assert store.get_many([], parallel) == []
    shuffled = [key(int(i)) for i in np.random.default_rng(5).permutation(400)]  # each value given back in place
    assert store.get_many(shuffled, parallel) == [data.get(k) for k in shuffled]


def test_writes_are_chunked_and_spread_over_shards(store):
    data = fill(store, 1000, seed=2)  # writeChunkSize is 100: many WriteBatches per shard
    per_shard = [sum(1 for _ in db.keys()) for db in store._dbs]
    assert sum(per_shard) == 1000 and all(n > 200 for n in per_shard)
    assert contents(store) == data


def test_scan_is_ordered_and_bounded_across_shards(store):
    data = fill(store, 500, seed=3)
    got = list(store.scan(key(100), key(200)))
    assert [k for k, _ in got] == [key(i) for i in range(100, 200)]
    assert all(v == data[k] for k, v in got)
    assert [k for k, _ in store.scan()] == sorted(data)


def test_delete_range(store):
    fill(store, 300, seed=4)
    store.delete_range(key(50), key(250))
    assert sorted(contents(store)) == [key(i) for i in list(range(50)) + list(range(250, 300))]


def test_load_rolls_back_and_forward(store):
    v0 = fill(store, 200, seed=5)
    store.checkpoint(0)
    fill(store, 200, seed=6, start=100)
    store.delete_range(key(0), key(10))
    v1 = contents(store)
    store.checkpoint(1)
    store.load(0)
    assert store.version == 0 and contents(store) == v0
    store.load(1)
    assert contents(store) == v1
    store.load(EMPTY_VERSION)
    assert contents(store) == {}


def test_rocksdb_options_come_from_the_config(tmp_path):
    cfg = MisaConfig.from_mapping(
        {
            "spark.misa.state.shards": "2",
            "spark.misa.rocksdb.compression": "zstd",
            "spark.misa.rocksdb.useDirectReads": "true",
            "spark.misa.rocksdb.writeBufferSize": "3m",
            "spark.misa.rocksdb.level0FileNumCompactionTrigger": "7",
        }
    )
    with StateStore(cfg, tmp_path / "s", f"file://{tmp_path / 'd'}") as s:
        fill(s, 10, seed=1)
        s.flush()
    options = sorted((tmp_path / "s" / "shard-1" / "db").glob("OPTIONS-*"))[-1].read_text()
    for expected in (
        "use_direct_reads=true",
        "write_buffer_size=3145728",
        "level0_file_num_compaction_trigger=7",
        "compression=kZSTD",
    ):
        assert expected in options


def test_missing_directories_name_the_key(config):
    with pytest.raises(ConfigError, match="spark.misa.state.dir"):
        StateStore(config, None, "file:///tmp/x")
    with pytest.raises(ConfigError, match="spark.misa.checkpoint.dfsUrl"):
        StateStore(config, "/tmp/x", None)
