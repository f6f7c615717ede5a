"""``misa bench live``'s regime flags down to each run's spark-submit command line, and what the output says."""

import argparse
from pathlib import Path

import pytest

from bench import live
from bench.live import LiveRun, environment, job_command, markdown
from bench.regimes import Regimes
from bench.workloads import VolumeCaches, input_name
from jobs.submit import native_state_store_conf
from misa.config import MisaConfig
from misa.exceptions import ConfigError
from tests.bench.test_regimes import fake_tool


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    live.add_parser(parser.add_subparsers())
    return parser.parse_args(["live", *argv])


def conf_of(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "--conf")


def arg_of(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


@pytest.fixture
def tools(tmp_path):
    fake_tool(tmp_path / "tools", "remote-dfs", "down")
    fake_tool(tmp_path / "tools", "slow-volume", "down")
    return tmp_path / "tools"


def test_the_volume_holds_the_working_state_and_sparks_local_dir_with_direct_reads_and_small_caches(
    tmp_path, tools, monkeypatch
):
    args = parse("--tools", str(tools), "--state-volume", "--volume-mount", "/mnt/v", "--volume-cache", "512k",
                 "--work", str(tmp_path / "w"), "--conf", "spark.misa.state.shards=2")  # fmt: skip
    monkeypatch.setattr(live.SlowVolume, "up", lambda self: setattr(self, "device", "loop7"))
    with Regimes() as regimes:
        env = environment(args, regimes)
    assert env.regimes["state_volume"] == {"mount": "/mnt/v", "read_iops": 3000, "write_iops": 3000, "bps": "125m",
        "device": "loop7", "cache_bytes": 512 << 10, "memory_bytes": 2 * (512 << 10) + 2 * 2 * (128 << 10)}  # fmt: skip
    assert "direct reads" in env.notes[0] and "Spark's store keeps the page cache" in env.notes[0]
    work = tmp_path / "w" / "runs" / "r"
    run = LiveRun("cm2", "misa", "", 100, "local", tmp_path / "t" / "cm2-misa-100", work, work)
    local = Path("/mnt/v/bench-live/local-cm2-misa-100")
    command, _ = job_command(args, env, run, tmp_path / "feed", local, ("spark.misa.prefetch.enabled=true",))
    conf = conf_of(command)
    assert arg_of(command, "--state-dir") == str(local / "state")
    assert conf["spark.local.dir"] == str(local / "spark-local")
    assert conf["spark.misa.rocksdb.useDirectReads"] == "true"
    assert conf["spark.misa.rocksdb.blockCacheSize"] == conf["spark.misa.cache.maxBytes"] == str(512 << 10)
    assert (conf["spark.misa.rocksdb.writeBufferSize"], conf["spark.misa.rocksdb.maxWriteBufferNumber"]) == (
        str(128 << 10),
        "2",
    )
    assert conf["spark.misa.prefetch.enabled"] == "true"  # the variant's settings still go along
    native = native_state_store_conf("native", MisaConfig.from_mapping(conf))  # Spark's store: scaled down too
    assert native["spark.sql.streaming.stateStore.rocksdb.writeBufferSizeMB"] == "1"
    assert native["spark.sql.streaming.stateStore.rocksdb.blockCacheSizeMB"] == "1"


def test_a_wrong_setting_of_the_shards_fails_at_start_with_its_key(tools, tmp_path, monkeypatch):
    monkeypatch.setattr(live.SlowVolume, "up", lambda self: None)
    args = parse("--tools", str(tools), "--state-volume", "--conf", "spark.misa.state.shards=0")
    with pytest.raises(ConfigError, match="spark.misa.state.shards"):
        with Regimes() as regimes:
            environment(args, regimes)


def test_memtables_scale_down_with_the_caches_but_not_below_rocksdbs_smallest():
    assert VolumeCaches(4 << 20, 4).write_buffer == 512 << 10
    assert VolumeCaches(64 << 10, 4).write_buffer == 64 << 10


def test_the_dfs_delay_puts_every_modes_checkpoint_on_the_mount(tmp_path, tools):
    args = parse("--tools", str(tools), "--dfs-delay", "10ms", "--dfs-mount", "/mnt/d", "--work", str(tmp_path))
    with Regimes() as regimes:
        env = environment(args, regimes)
    assert env.targets == {"dfs-20ms": "/mnt/d/bench-live"}
    assert env.regimes == {"dfs": {"mount": "/mnt/d", "rate": "400mbit", "one_way_delay_ms": 10.0, "rtt_ms": 20.0}}
    assert (tools / "remote-dfs.log").read_text().splitlines()[-1] == "down"  # torn down: this bench set it up


def test_a_relative_target_or_work_folder_is_made_absolute_so_that_the_jobs_dfs_url_is_a_path(tmp_path, monkeypatch):
    """``--target local=bench-out/x`` gave the job ``--dfs file://bench-out/x/...``, which names host
    ``bench-out``: the job refused it and the bench stopped."""
    monkeypatch.chdir(tmp_path)
    with Regimes() as regimes:
        env = environment(parse("--target", "zero=bench-out/x", "--work", str(tmp_path)), regimes)
        default = environment(parse("--work", "bench-out/w"), regimes)
    assert env.targets == {"zero": str(tmp_path / "bench-out" / "x")}
    assert default.targets == {"local": str(tmp_path / "bench-out" / "w" / "local")}  # the default target too


@pytest.mark.parametrize("flag,on_target", [((), False), (("--output-on-target",), True)])
def test_the_output_goes_to_the_target_only_when_asked(tmp_path, flag, on_target):
    """Spark's checkpoint and the durable state are on the target in every regime; the jobs' output is the
    user's own synchronous write, kept local unless asked for."""
    args = parse("--work", str(tmp_path), *flag)
    with Regimes() as regimes:
        env = environment(args, regimes)
    run = LiveRun("cm2", "misa", "", 100, "local", tmp_path / "t", tmp_path / "w", tmp_path / "w")
    command, _ = job_command(args, env, run, tmp_path / "in", tmp_path / "w", ())
    assert arg_of(command, "--checkpoint") == str(tmp_path / "t" / "checkpoint")
    assert arg_of(command, "--output") == str((tmp_path / "t" if on_target else tmp_path / "w") / "output")


def test_bad_regime_values_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        parse("--dfs-delay", "ten")
    assert "--dfs-delay: 'ten' is not a duration" in capsys.readouterr().err


def test_ysb_gets_the_benchs_redis_through_the_environment_and_native_runs_as_a_stream(tmp_path):
    args = parse("--queries", "ysb", "--redis-delay", "0.5ms", "--work", str(tmp_path))
    with Regimes() as regimes:
        env = environment(args, regimes)
        proxy = regimes.entered["redis"]
        assert f":{proxy.listen_port}/" in env.redis.url and env.regimes["redis"]["rtt_ms"] == 1.0
        for mode in ("misa", "native"):
            run = LiveRun("ysb", mode, "", 100, "local", tmp_path / "t", tmp_path / "w", tmp_path / "w")
            command, job_env = job_command(args, env, run, tmp_path / "feed", tmp_path / "w", ())
            assert job_env["MISA_REDIS_URL"] == env.redis.url and env.redis.url not in " ".join(command)
            assert ("--native-stream" in command) == (mode == "native")


def test_each_size_parameter_has_its_own_input():
    args = parse("--jobs", "1000000", "--ysb-ads", "200000", "--q20-in-flight", "5000", "--seconds", "30")
    assert input_name("cm", args, 2500) == "cm-1000000jobs-2500-30"
    assert input_name("ysb", args, 2500) == "ysb-200000ads-2500-30"
    assert input_name("nexmark", args, 2500) == "nexmark-5000inflight-2500-30"


def row(**extra) -> dict:
    base = {"query": "cm2", "target": "local", "mode": "misa", "variant": "", "rate": 100.0, "batches": 5,
            "batch_p50": 1.0, "batch_p99": 2.0, "e2e_p50": 3.0, "e2e_p99": 4.0, "backlog_files": 0,
            "sustained": True, "state_keys": 1_200_000, "spark_state_rows": None, "phases": {},
            "prefetch": None}  # fmt: skip
    return {**base, **extra}


def test_the_table_says_the_regimes_the_states_size_and_the_device_reads():
    volume = {"state_volume": {"memory_bytes": 1 << 20}}
    table = markdown(
        [
            row(sst_bytes=64 << 20, device_reads_per_batch=1234.0, regimes=volume),
            row(mode="sync", sst_bytes=8 << 20, device_reads_per_batch=None, regimes=volume),
        ],
        False,
        ["state volume: slow-volume at /mnt/v"],
    )
    assert table.startswith("Regime: state volume: slow-volume at /mnt/v.")
    assert "| 1,200,000 | n/a | 64.0 MiB | 1,234 |" in table
    assert "| 8.0 MiB | n/a |" in table
    assert "under 20x the runtime's caches and memtables in cm2 sync 100/s" in table


@pytest.mark.parametrize("flag,mode", [((), None), (("--output-mode", "append"), "append")])
def test_the_jobs_output_mode_is_theirs_unless_given(tmp_path, flag, mode):
    args = parse("--work", str(tmp_path), *flag)
    with Regimes() as regimes:
        env = environment(args, regimes)
    run = LiveRun("cm2", "misa", "", 100, "local", tmp_path / "t", tmp_path / "w", tmp_path / "w")
    command, _ = job_command(args, env, run, tmp_path / "in", tmp_path / "w", ())
    assert ("--output-mode" in command) == (mode is not None)
    if mode:
        assert arg_of(command, "--output-mode") == mode


def test_spark_runs_once_when_the_variants_set_only_misas_settings():
    """Placement variants (``spark.misa.*``) run every misa mode per variant but Spark's store once, unnamed; a
    variant that sets Spark's own settings runs native per variant."""
    from bench.live import Variant, _applicable

    placements = [Variant("driver", ("spark.misa.state.placement=driver",)), Variant("hosts", ("spark.misa.x=1",))]
    runs = [("cm2", ("local", "/t"), mode, v) for mode in ("misa", "native") for v in placements]
    assert [(mode, v.name) for _, _, mode, v in _applicable(runs)] == [
        ("misa", "driver"),
        ("misa", "hosts"),
        ("native", ""),
    ]
    spark_conf = [Variant("a", ("spark.sql.shuffle.partitions=2",)), Variant("b", ("spark.sql.shuffle.partitions=4",))]
    runs = [("cm2", ("local", "/t"), "native", v) for v in spark_conf]
    assert [v.name for _, _, _, v in _applicable(runs)] == ["a", "b"]
