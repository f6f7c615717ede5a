"""The live benchmark's regimes: the tools' command lines, reuse of a file system already up, tear-down on
failure and SIGTERM, the device's reads; the real slow-volume and latency-proxy where this host allows."""

import mmap
import os
import signal
import time
from pathlib import Path

import pytest
import redis

from bench.exceptions import RegimeError
from bench.regimes import DEFAULT_TOOLS, DiskSampler, RedisProxy, Regimes, RemoteDfs, SlowVolume, device_reads
from services.redis_server import RedisServer

ROOT_TOOLS = pytest.mark.skipif(os.geteuid() != 0, reason="a loop device and a mount need root")


def fake_tool(tools: Path, name: str, status: str) -> Path:
    """A stand-in for a tool: logs its arguments, answers ``status`` with ``status``; returns the log."""
    tools.mkdir(exist_ok=True)
    log = tools / f"{name}.log"
    script = tools / name
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\n[ "$1" = status ] && echo "{status}"\nexit 0\n')
    script.chmod(0o755)
    return log


def test_remote_dfs_command_lines_are_the_tools_usage(tmp_path):
    dfs = RemoteDfs(tmp_path, "10ms", "400mbit", Path("/mnt/x"))
    assert dfs.command("up") == [str(tmp_path / "remote-dfs"), "up", "--mount", "/mnt/x", "--rate", "400mbit",
                                 "--delay", "10ms"]  # fmt: skip
    assert dfs.command("down") == [str(tmp_path / "remote-dfs"), "down"]
    assert dfs.record() == {"mount": "/mnt/x", "rate": "400mbit", "one_way_delay_ms": 10.0, "rtt_ms": 20.0}


def test_a_dfs_that_is_down_is_set_up_and_torn_down_by_the_bench(tmp_path):
    log = fake_tool(tmp_path, "remote-dfs", "down")
    with Regimes() as regimes:
        regimes.enter("dfs", RemoteDfs(tmp_path, "10ms", mount=Path("/mnt/x")))
    assert log.read_text().splitlines() == ["status", "up --mount /mnt/x --rate 400mbit --delay 10ms", "down"]


def test_a_dfs_already_up_with_the_same_parameters_is_reused_and_left_up(tmp_path):
    log = fake_tool(tmp_path, "remote-dfs", "up: /mnt/misa-dfs at 400mbit, one-way delay 10ms")
    with Regimes() as regimes:
        dfs = regimes.enter("dfs", RemoteDfs(tmp_path, "0.01s"))  # the same delay, written otherwise
    assert not dfs.owned and log.read_text().splitlines() == ["status"]


def test_a_dfs_up_with_other_parameters_is_an_error_naming_both(tmp_path):
    log = fake_tool(tmp_path, "remote-dfs", "up: /mnt/misa-dfs at 400mbit, one-way delay 5ms")
    with pytest.raises(RegimeError, match="up at /mnt/misa-dfs with 400mbit and a 5ms delay, not .* 10ms"):
        with Regimes() as regimes:
            regimes.enter("dfs", RemoteDfs(tmp_path, "10ms"))
    assert log.read_text().splitlines() == ["status"]  # nothing brought down


def test_a_missing_tool_names_the_flag(tmp_path):
    with pytest.raises(RegimeError, match="not found: give the tools' folder with --tools"):
        RemoteDfs(tmp_path / "nowhere", "10ms").up()


def test_a_slow_volume_up_with_other_limits_is_an_error(tmp_path):
    fake_tool(tmp_path, "slow-volume", "up: /mnt/v (3000 read IOPS, 3000 write IOPS, 125m/s)")
    with pytest.raises(RegimeError, match="3000/3000 read/write IOPS and 125m/s, not /mnt/v with 1000/3000"):
        SlowVolume(tmp_path, Path("/mnt/v"), read_iops=1000).up()
    cmd = SlowVolume(tmp_path, Path("/mnt/v"), 100, 200, "10m", "1G").command("up")
    assert cmd[1:] == ["up", "--mount", "/mnt/v", "--size", "1G", "--read-iops", "100", "--write-iops", "200",
                       "--bps", "10m"]  # fmt: skip


class Recorder:
    """A regime that logs its set-up and tear-down."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def up(self):
        self.log.append(f"up {self.name}")

    def down(self):
        self.log.append(f"down {self.name}")

    def record(self):
        return {"name": self.name}


def test_regimes_are_torn_down_in_reverse_order_when_a_run_fails():
    log: list = []
    with pytest.raises(ValueError):
        with Regimes() as regimes:
            regimes.enter("a", Recorder("a", log))
            regimes.enter("b", Recorder("b", log))
            assert regimes.record() == {"a": {"name": "a"}, "b": {"name": "b"}}
            raise ValueError("a run failed")
    assert log == ["up a", "up b", "down b", "down a"]


def test_sigterm_interrupts_the_bench_and_tears_the_regimes_down():
    log: list = []
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with Regimes() as regimes:
            regimes.enter("a", Recorder("a", log))
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted
    assert log == ["up a", "down a"] and signal.getsignal(signal.SIGTERM) is previous


def test_device_reads_come_from_diskstats_and_are_interpolated_per_batch(tmp_path):
    stats = tmp_path / "diskstats"
    stats.write_text("   7       3 loop3 120 0 960 10 5 0 40 3 0 12 13 0 0 0 0 0 0\n")
    assert device_reads("loop3", stats) == 120
    with pytest.raises(RegimeError, match="loop9 is not in"):
        device_reads("loop9", stats)
    sampler = DiskSampler("loop3", samples=[(100.0, 0), (101.0, 100), (103.0, 100), (104.0, 400)])
    assert sampler.reads_between(100.5, 103.5) == pytest.approx(50 + 150)


def test_redis_behind_the_latency_proxy_answers_a_round_trip_later():
    with RedisServer() as server:
        proxy = RedisProxy(DEFAULT_TOOLS, "20ms", server.port)  # ../shared/tools is beside every clone, CI's too
        with Regimes() as regimes:
            regimes.enter("redis", proxy)
            url = server.url.replace(f":{server.port}/", f":{proxy.listen_port}/")
            with redis.Redis.from_url(url) as client:
                client.ping()  # the connection and AUTH
                started = time.monotonic()
                client.ping()
                assert time.monotonic() - started >= 0.04  # 2 x 20 ms
            process = proxy.process
        assert proxy.process is None and process.poll() is not None  # stopped


@ROOT_TOOLS
def test_the_slow_volume_is_set_up_counts_device_reads_and_is_torn_down(tmp_path):
    mount = tmp_path / "vol"
    if "up" in os.popen(f"{DEFAULT_TOOLS / 'slow-volume'} status").read():
        # the tool keeps one volume per host: setting up ours would take down another user's benchmark volume
        pytest.skip("a slow volume is up already (another user)")
    with Regimes() as regimes:
        volume = regimes.enter("v", SlowVolume(DEFAULT_TOOLS, mount, 2000, 2000, "50m", "64M"))
        assert volume.owned and volume.device.startswith("loop") and os.path.ismount(mount)
        data = mount / "data"
        data.write_bytes(os.urandom(1 << 20))
        os.sync()
        before = device_reads(volume.device)
        fd = os.open(data, os.O_RDONLY | os.O_DIRECT)  # past the page cache, as RocksDB's direct reads
        try:
            buffer = mmap.mmap(-1, 4096)  # aligned
            for block in range(16):
                os.preadv(fd, [buffer], block * 4096)
        finally:
            os.close(fd)
        assert device_reads(volume.device) - before >= 16
    assert not os.path.ismount(mount)
