"""Every entry point that is given no ``config=`` reads the ``spark.misa.*`` settings of the Spark session (issue 44):
``misa.from_query``, ``misa.transform_with_state_in_pandas`` and ``misa.StatefulJob`` (the active session); an
explicit ``config=`` wins, and a malformed setting fails at construction naming its key."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor

from misa import ConfigError, MisaConfig, StatefulJob, from_query, transform_with_state_in_pandas
from misa.config_keys import CommitMode
from misa.operators.aggregation import Agg, Aggregation
from verify.differential.catalog import ENTRIES, SOURCE_SCHEMA

SESSION = {"spark.misa.state.shards": "2", "spark.misa.commit.mode": "sync"}


class Counter(StatefulProcessor):
    """Counts rows per key (only built here, never run)."""

    def init(self, handle) -> None:
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows, timerValues):
        yield pd.DataFrame({"k": [key[0]], "n": [sum(len(frame) for frame in rows)]})


def _discard(batch_id: int, table) -> None:
    """The sink: the jobs here are only built."""


def _from_query(spark, tmp_path, **options):
    (tmp_path / "in").mkdir(exist_ok=True)
    rows = spark.readStream.schema(SOURCE_SCHEMA).json(str(tmp_path / "in"))
    return from_query(
        ENTRIES[0].build(rows), _discard, str(tmp_path / "ckpt"), output_mode="update", echo=None, **options
    )


def _processor(spark, tmp_path, **options):
    (tmp_path / "in").mkdir(exist_ok=True)
    stream = spark.readStream.schema("k string, v long").json(str(tmp_path / "in"))
    return transform_with_state_in_pandas(
        stream,
        ["k"],
        Counter(),
        "k string, n long",
        "Update",
        "None",
        _discard,
        str(tmp_path / "ckpt"),
        echo=None,
        **options,
    )


def _stateful(spark, tmp_path, **options):
    operator = Aggregation(["k"], [Agg("n", "count", "x")])
    return StatefulJob(operator, _discard, str(tmp_path / "ckpt"), echo=None, **options)


BUILDERS = {"from_query": _from_query, "transform_with_state_in_pandas": _processor, "StatefulJob": _stateful}


def _config(job) -> MisaConfig:
    return job.config if isinstance(job, StatefulJob) else job.job.config


def test_from_session_reads_the_launch_conf_under_the_sessions_settings():
    """--conf, spark-defaults.conf and the builder's .config reach the launch conf; spark.conf.set overrides it."""
    launch = {"spark.misa.state.processes": "2", "spark.misa.state.shards": "3", "spark.app.name": "x"}
    spark = SimpleNamespace(
        sparkContext=SimpleNamespace(getConf=lambda: SimpleNamespace(getAll=lambda: list(launch.items()))),
        conf=SimpleNamespace(getAll={"spark.misa.state.shards": "2", "spark.sql.shuffle.partitions": "4"}),
    )
    config = MisaConfig.from_session(spark)
    assert (config.state_processes, config.state_shards) == (2, 2)


def test_from_session_reads_the_newest_session_settings(spark, session_conf):
    session_conf({"spark.misa.commit.mode": "sync"})
    assert MisaConfig.from_session(spark).commit_mode is CommitMode.SYNC
    session_conf({"spark.misa.commit.mode": "async-ckpt"})  # set later in the session: the newest value
    assert MisaConfig.from_session(spark).commit_mode is CommitMode.ASYNC_CKPT


def test_from_session_without_a_session_is_the_defaults(spark, session_conf, monkeypatch):
    session_conf(SESSION)
    assert MisaConfig.from_session().state_shards == 2  # the active session
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    assert MisaConfig.from_session() == MisaConfig()


@pytest.mark.parametrize("entry", BUILDERS)
def test_the_sessions_settings_apply_without_config(spark, tmp_path, session_conf, entry):
    session_conf(SESSION)
    job = BUILDERS[entry](spark, tmp_path)
    try:
        assert (_config(job).state_shards, _config(job).commit_mode) == (2, CommitMode.SYNC)
        assert _config(job) == MisaConfig.from_mapping(SESSION)
    finally:
        job.close()


@pytest.mark.parametrize("entry", BUILDERS)
def test_an_explicit_config_wins_over_the_session(spark, tmp_path, session_conf, entry):
    session_conf(SESSION)
    given = MisaConfig.from_mapping({"spark.misa.state.shards": "3"})
    job = BUILDERS[entry](spark, tmp_path, config=given)
    try:
        assert _config(job) is given
    finally:
        job.close()


@pytest.mark.parametrize("entry", BUILDERS)
def test_a_malformed_session_setting_fails_at_construction_naming_its_key(spark, tmp_path, session_conf, entry):
    session_conf({"spark.misa.state.shards": "0"})
    with pytest.raises(ConfigError, match=r"spark\.misa\.state\.shards='0' is out of range"):
        BUILDERS[entry](spark, tmp_path)
    session_conf({"spark.misa.state.shards": "2", "spark.misa.stat.processes": "2"})
    with pytest.raises(ConfigError, match=r"unknown configuration key spark\.misa\.stat\.processes"):
        BUILDERS[entry](spark, tmp_path)


def test_the_sessions_process_count_runs_that_many_processes(spark, tmp_path, session_conf):
    """The report: spark.misa.state.processes=2 on the session, and from_query ran one process."""
    session_conf({"spark.misa.state.processes": "2", "spark.misa.state.shards": "2"})
    job = _from_query(spark, tmp_path)
    try:
        assert job.job.processes == 2
    finally:
        job.close()
