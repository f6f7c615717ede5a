import dataclasses
from pathlib import Path

import pytest
from pyspark import SparkConf

from misa.config import MisaConfig
from misa.config_docs import defaults_file_text
from misa.config_keys import CommitMode, settings
from misa.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_file_lists_every_key_with_its_default():
    assert (ROOT / "conf" / "misa-defaults.conf").read_text() == defaults_file_text()
    assert MisaConfig.from_file(ROOT / "conf" / "misa-defaults.conf") == MisaConfig()
    assert len(list(settings())) == len(dataclasses.fields(MisaConfig))


def test_values_are_typed():
    cfg = MisaConfig.from_mapping(
        {
            "spark.misa.rocksdb.writeBufferSize": "8m",
            "spark.misa.checkpoint.retry.initialBackoff": "250ms",
            "spark.misa.checkpoint.retry.maxBackoff": "2min",
            "spark.misa.rocksdb.useDirectReads": "TRUE",
            "spark.misa.state.shards": "7",
            "spark.sql.shuffle.partitions": "3",  # not ours: ignored
        }
    )
    assert cfg.rocksdb_write_buffer_bytes == 8 << 20
    assert cfg.retry_initial_backoff_s == pytest.approx(0.25)
    assert cfg.retry_max_backoff_s == 120
    assert cfg.rocksdb_direct_reads is True
    assert cfg.state_shards == 7
    assert MisaConfig().commit_max_restarts == 3
    assert MisaConfig.from_mapping({"spark.misa.commit.maxRestarts": "0"}).commit_max_restarts == 0


def test_unknown_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"spark\.misa\.state\.shard\b.*did you mean spark\.misa\.state\.shards"):
        MisaConfig.from_mapping({"spark.misa.state.shard": "2"})


@pytest.mark.parametrize(
    "key,value,form",
    [
        ("spark.misa.state.shards", "four", "an integer >= 1"),
        ("spark.misa.state.shards", "1.5", "an integer >= 1"),
        ("spark.misa.state.processes", "0", "auto or an integer >= 1"),
        ("spark.misa.state.processes", "many", "auto or an integer >= 1"),
        ("spark.misa.rocksdb.compression", "brotli", "one of none, snappy, lz4, zstd, zlib"),
        ("spark.misa.rocksdb.blockCacheSize", "12 parsecs", "a size >= 0, such as"),
        ("spark.misa.cache.maxBytes", "-1m", "a size >= 1, such as"),
        ("spark.misa.state.memoryTier.maxBytes", "-1", "a size >= 0, such as"),
        ("spark.misa.checkpoint.retry.maxBackoff", "soon", "a duration from 0s to 1000h, such as"),
        ("spark.misa.checkpoint.verifyReads", "yes", "true or false"),
        ("spark.misa.prefetch.wastedRatioThreshold", "half", "a number from 0 to 1"),
        ("spark.misa.prefetch.enabled", "maybe", "true, false or auto"),
        ("spark.misa.commit.mode", "async", "one of sync, async-ckpt, misa, nocommit"),
    ],
)
def test_malformed_value_names_key_and_form(key, value, form):
    with pytest.raises(ConfigError) as err:
        MisaConfig.from_mapping({key: value})
    assert f"{key}={value!r} is malformed" in str(err.value) and form in str(err.value)


#: (key, a value outside its range, the value at that end of the range, the range as errors show it)
RANGES = [
    ("spark.misa.state.shards", "0", "1", ">= 1"),
    ("spark.misa.aggregate.collectMaxItems", "0", "1", "from 1 to 2147483647"),
    ("spark.misa.state.retainVersions", "1", "2", ">= 2"),  # a rollback by one version needs the one before
    ("spark.misa.state.hostMaxFailures", "0", "1", ">= 1"),  # 0 would fail a batch at a host's first loss
    ("spark.misa.state.standbyReplicas", "-1", "0", ">= 0"),
    ("spark.misa.state.hostOutputDriverRows", "-1", "0", ">= 0"),
    ("spark.misa.state.hostDeltasDriverRows", "-1", "0", ">= 0"),
    ("spark.misa.state.writeChunkSize", "0", "1", ">= 1"),
    ("spark.misa.commit.heartbeatTimeout", "0", "1ms", "> 0s and <= 1000h"),  # 0: every thread "silent"
    ("spark.misa.commit.heartbeatTimeout", "0ms", "1ms", "> 0s and <= 1000h"),
    ("spark.misa.commit.heartbeatTimeout", "1001h", "1000h", "> 0s and <= 1000h"),
    ("spark.misa.state.livenessTimeout", "0s", "1ms", "> 0s and <= 1000h"),  # 0: every host or worker "hung"
    ("spark.misa.state.hostStartTimeout", "0s", "1ms", "> 0s and <= 1000h"),
    ("spark.misa.commit.maxRestarts", "-1", "0", ">= 0"),
    ("spark.misa.checkpoint.uploadThreads", "0", "1", ">= 1"),
    ("spark.misa.checkpoint.retry.maxAttempts", "0", "1", ">= 1"),
    ("spark.misa.checkpoint.retry.initialBackoff", "1001h", "10s", "from 0s to 1000h"),
    ("spark.misa.checkpoint.retry.maxBackoff", "60001min", "1000h", "from 0s to 1000h"),
    ("spark.misa.checkpoint.retry.jitter", "3600001s", "0", "from 0s to 1000h"),
    ("spark.misa.rocksdb.writeBufferSize", "0", "64k", "from 64k to 64g"),  # RocksDB would clip it
    ("spark.misa.rocksdb.writeBufferSize", "63k", "64k", "from 64k to 64g"),
    ("spark.misa.rocksdb.writeBufferSize", "65g", "64g", "from 64k to 64g"),
    ("spark.misa.rocksdb.maxWriteBufferNumber", "1", "2", "from 2 to 2147483647"),
    ("spark.misa.rocksdb.maxWriteBufferNumber", "2147483648", "2147483647", "from 2 to 2147483647"),  # a C int
    ("spark.misa.rocksdb.level0FileNumCompactionTrigger", "0", "1", "from 1 to 2147483647"),
    ("spark.misa.rocksdb.level0FileNumCompactionTrigger", "2147483648", "2147483647", "from 1 to 2147483647"),
    ("spark.misa.rocksdb.blockSize", "0", "1", ">= 1 and < 4g"),
    ("spark.misa.rocksdb.blockSize", "4g", "4194303k", ">= 1 and < 4g"),  # RocksDB refuses 4 GiB
    ("spark.misa.rocksdb.bloomFilterBitsPerKey", "-1", "0", "from 0 to 100"),
    ("spark.misa.rocksdb.bloomFilterBitsPerKey", "101", "100", "from 0 to 100"),  # RocksDB would cap it
    ("spark.misa.rocksdb.maxBackgroundJobs", "0", "1", "from 1 to 2147483647"),
    ("spark.misa.rocksdb.maxBackgroundJobs", "2147483648", "2147483647", "from 1 to 2147483647"),
    ("spark.misa.cache.maxBytes", "0", "1", ">= 1"),  # issue 24: it failed only when the cache was built
    ("spark.misa.cache.maxBytes", "0k", "1", ">= 1"),
    ("spark.misa.prefetch.threads", "0", "1", ">= 1"),
    ("spark.misa.prefetch.chunkKeys", "0", "1", ">= 1"),
    ("spark.misa.prefetch.sketch.depth", "0", "1", ">= 1"),
    ("spark.misa.prefetch.sketch.width", "15", "16", "from 16 to 4294967296"),
    ("spark.misa.prefetch.sketch.width", "4294967297", "4294967296", "from 16 to 4294967296"),  # 32-bit row index
    ("spark.misa.prefetch.sketch.hotThreshold", "0", "1", "from 1 to 254"),
    ("spark.misa.prefetch.sketch.hotThreshold", "255", "254", "from 1 to 254"),  # counters saturate at 255
    ("spark.misa.prefetch.sketch.agingRecords", "0", "1", ">= 1"),
    ("spark.misa.prefetch.wastedRatioThreshold", "1.5", "1", "from 0 to 1"),
    ("spark.misa.prefetch.wastedRatioThreshold", "-0.1", "0", "from 0 to 1"),
    ("spark.misa.prefetch.wastedRatioThreshold", "nan", "0.5", "from 0 to 1"),
    ("spark.misa.prefetch.auto.minReadShare", "1.1", "1", "from 0 to 1"),
    ("spark.misa.prefetch.auto.patience", "0", "1", "from 1 to 1000"),
    ("spark.misa.prefetch.auto.patience", "1001", "1000", "from 1 to 1000"),
    ("spark.misa.metrics.prometheusPort", "-1", "0", "from 0 to 65535"),  # 0: no endpoint
    ("spark.misa.metrics.prometheusPort", "65536", "65535", "from 0 to 65535"),
    ("spark.misa.python.switchInterval", "0ms", "0.001ms", "from 0.001ms to 1000h"),
    ("spark.misa.python.switchInterval", "0.0005ms", "0.001ms", "from 0.001ms to 1000h"),  # Python: whole µs
    ("spark.misa.python.switchInterval", "1001h", "1000h", "from 0.001ms to 1000h"),
]


@pytest.mark.parametrize("key,bad,edge,valid", RANGES)
def test_a_number_outside_its_range_is_refused_when_the_config_is_built(key, bad, edge, valid):
    with pytest.raises(ConfigError) as err:
        MisaConfig.from_mapping({key: bad})
    assert f"{key}={bad!r} is out of range: expected " in str(err.value) and valid in str(err.value)
    MisaConfig.from_mapping({key: edge})  # the end of the range itself is valid


def test_every_numeric_setting_has_a_range_and_a_test_of_it():
    numeric = {f.metadata["key"]: f for f in dataclasses.fields(MisaConfig) if f.type in ("int", "float")}
    assert len(numeric) > 20
    assert all(f.metadata["kind"].bounds is not None for f in numeric.values())
    untested = set(numeric) - {key for key, *_ in RANGES}
    # >= 0: no text that parses is outside it (a negative one is malformed, tested above)
    assert untested == {
        "spark.misa.rocksdb.blockCacheSize",
        "spark.misa.prefetch.auto.minDeviceReadBytes",
        "spark.misa.state.memoryTier.maxBytes",
    }


def test_processes_are_auto_or_a_count():
    assert MisaConfig().state_processes is None
    assert MisaConfig.from_mapping({"spark.misa.state.processes": " AUTO "}).state_processes is None
    assert MisaConfig.from_mapping({"spark.misa.state.processes": "3"}).state_processes == 3


def test_typed_values_are_checked_too():
    with pytest.raises(ConfigError, match=r"spark\.misa\.cache\.maxBytes='0' is out of range: expected a size >= 1"):
        MisaConfig().with_values(cache_max_bytes=0)
    with pytest.raises(ConfigError, match=r"spark\.misa\.commit\.heartbeatTimeout='0s' is out of range"):
        MisaConfig(commit_heartbeat_timeout_s=0.0)
    with pytest.raises(ConfigError, match=r"spark\.misa\.prefetch\.sketch\.width='8' is out of range.*from 16"):
        MisaConfig().with_values(prefetch_sketch_width=8)
    assert MisaConfig().with_values(commit_heartbeat_timeout_s=0.3).commit_heartbeat_timeout_s == 0.3


def test_the_longest_backoff_is_at_least_the_first():
    with pytest.raises(ConfigError) as err:
        MisaConfig.from_mapping(
            {"spark.misa.checkpoint.retry.initialBackoff": "2s", "spark.misa.checkpoint.retry.maxBackoff": "500ms"}
        )
    assert "spark.misa.checkpoint.retry.maxBackoff='500ms' is below" in str(err.value)
    assert "spark.misa.checkpoint.retry.initialBackoff='2s'" in str(err.value)
    same = {"spark.misa.checkpoint.retry.initialBackoff": "2s", "spark.misa.checkpoint.retry.maxBackoff": "2s"}
    assert MisaConfig.from_mapping(same).retry_max_backoff_s == 2


def test_standby_replicas_need_the_executors_placement_and_a_mode_that_checkpoints():
    with pytest.raises(ConfigError, match=r"standbyReplicas=1 needs spark.misa.state.placement=executors"):
        MisaConfig.from_mapping({"spark.misa.state.standbyReplicas": "1"})
    on_executors = {"spark.misa.state.standbyReplicas": "1", "spark.misa.state.placement": "executors"}
    with pytest.raises(ConfigError, match=r"standbyReplicas=1 with spark.misa.commit.mode=nocommit"):
        MisaConfig.from_mapping({**on_executors, "spark.misa.commit.mode": "nocommit"})
    assert MisaConfig.from_mapping(on_executors).state_standby_replicas == 1


def test_from_spark_conf_and_properties_file(tmp_path):
    conf = SparkConf(loadDefaults=False).set("spark.misa.state.shards", "2").set("spark.app.name", "x")
    assert MisaConfig.from_spark_conf(conf).state_shards == 2
    props = tmp_path / "p.conf"
    props.write_text("# comment\nspark.misa.state.retainVersions   4\nspark.misa.rocksdb.compression=zstd\n")
    cfg = MisaConfig.from_file(props)
    assert (cfg.state_retain_versions, cfg.rocksdb_compression) == (4, "zstd")


def test_config_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        MisaConfig().state_shards = 9  # type: ignore[misc]


@pytest.mark.parametrize("text", ["sync", "async-ckpt", " misa ", "nocommit"])
def test_the_commit_mode_is_parsed_into_its_enum_and_reads_as_its_text(text):
    mode = MisaConfig.from_mapping({"spark.misa.commit.mode": text}).commit_mode
    assert mode is CommitMode(text.strip()) and mode == text.strip() and f"{mode}" == text.strip()


def test_the_default_commit_mode_is_misa_and_the_defaults_file_writes_its_text():
    assert MisaConfig().commit_mode is CommitMode.MISA
    assert "\nspark.misa.commit.mode misa\n" in defaults_file_text()
