import dataclasses
from pathlib import Path

import pytest
from pyspark import SparkConf

from misa.config import ConfigError, MisaConfig, defaults_file_text, settings

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
        ("spark.misa.state.shards", "0", "integer >= 1"),
        ("spark.misa.state.shards", "four", "integer >= 1"),
        ("spark.misa.state.retainVersions", "1", "integer >= 2"),  # a rollback by one version needs the one before
        ("spark.misa.rocksdb.compression", "brotli", "one of none, snappy, lz4, zstd, zlib"),
        ("spark.misa.rocksdb.blockCacheSize", "12 parsecs", "a size such as"),
        ("spark.misa.checkpoint.retry.maxBackoff", "soon", "a duration such as"),
        ("spark.misa.checkpoint.verifyReads", "yes", "true or false"),
        ("spark.misa.commit.heartbeatTimeout", "0", "a duration above zero"),  # 0: every thread would be "silent"
        ("spark.misa.commit.heartbeatTimeout", "0ms", "a duration above zero"),
        ("spark.misa.commit.maxRestarts", "-1", "integer >= 0"),
    ],
)
def test_malformed_value_names_key_and_form(key, value, form):
    with pytest.raises(ConfigError) as err:
        MisaConfig.from_mapping({key: value})
    assert key in str(err.value) and form in str(err.value)


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
