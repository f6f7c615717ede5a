"""What ``misa bench live`` runs and on what: the queries, their inputs' size parameters, and the regimes'
settings (the state volume's scaled-down caches, YSB's Redis).

The parameters that make the state large (item 2 of issue 26): CM2's ``--jobs`` and ``--watermark-delay``
(its runtime state holds a key per job id and open window), YSB's ``--ysb-ads`` (the ad -> campaign
table the runtime keeps in its state, looked up in Redis when missing) and Q20's ``--q20-in-flight``
(how many of the most recent auctions a bid may name: the auction table stays read for that long).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from bench.regimes import SlowVolume
from jobs.gen.cm import generate_cm
from jobs.gen.lr import generate_lr
from jobs.gen.nexmark import generate_nexmark
from jobs.gen.parts import SIDE_DIR
from jobs.gen.ysb import CAMPAIGNS_FILE, generate_ysb
from misa.config import MisaConfig
from services.redis_server import RedisServer, store_mapping

QUERIES = {
    "cm1": "cluster_monitoring.py",
    "cm2": "cluster_monitoring.py",
    "lr2": "linear_road.py",
    "lr4": "linear_road.py",
    "q20": "nexmark.py",
    "ysb": "ysb.py",
}
WORKLOADS = {"cluster_monitoring.py": "cm", "linear_road.py": "lr", "nexmark.py": "nexmark", "ysb.py": "ysb"}
YSB_CAMPAIGNS = 100  # the generator's default; --ysb-ads is spread over them
MIN_WRITE_BUFFER = 64 << 10  # RocksDB's smallest memtable (spark.misa.rocksdb.writeBufferSize)
VOLUME_WRITE_BUFFERS = 2  # memtables per shard on the volume (one active, one flushing)


def generator(workload: str, args: argparse.Namespace) -> Callable[[Path, float, int], dict]:
    """The workload's input generator with the bench's size parameters (seed 1)."""
    if workload == "cm":
        return lambda out, rate, s: generate_cm(out, rate, s, seed=1, jobs=args.jobs, progress=False)
    if workload == "lr":
        return lambda out, rate, s: generate_lr(out, rate, s, seed=1, progress=False)
    if workload == "nexmark":
        return lambda out, rate, s: generate_nexmark(
            out, rate, s, seed=1, in_flight_auctions=args.q20_in_flight, progress=False
        )
    per_campaign = max(1, args.ysb_ads // YSB_CAMPAIGNS)
    return lambda out, rate, s: generate_ysb(
        out, rate, s, seed=1, campaigns=YSB_CAMPAIGNS, ads_per_campaign=per_campaign, progress=False
    )


def input_name(workload: str, args: argparse.Namespace, rate: float) -> str:
    """The input's folder name: the workload, its size parameter, the rate and the seconds (one input each)."""
    size = {"cm": f"-{args.jobs}jobs", "nexmark": f"-{args.q20_in_flight}inflight", "ysb": f"-{args.ysb_ads}ads"}
    return f"{workload}{size.get(workload, '')}-{int(rate)}-{args.seconds}"


@dataclass(frozen=True)
class VolumeCaches:
    """The runtime's memory on the state volume: block cache and state cache of ``cache`` bytes each, and
    memtables scaled down with them (``write_buffer`` bytes, ``VOLUME_WRITE_BUFFERS`` per shard)."""

    cache: int
    shards: int

    @property
    def write_buffer(self) -> int:
        return max(MIN_WRITE_BUFFER, self.cache // (VOLUME_WRITE_BUFFERS * self.shards))

    @property
    def total(self) -> int:
        """Bytes of state the runtime can hold in memory: both caches and every memtable."""
        return 2 * self.cache + self.shards * VOLUME_WRITE_BUFFERS * self.write_buffer

    def conf(self) -> tuple[str, ...]:
        """The Spark settings (before the bench's ``--conf``, which may override them)."""
        return (
            "spark.misa.rocksdb.useDirectReads=true",
            f"spark.misa.rocksdb.blockCacheSize={self.cache}",
            f"spark.misa.cache.maxBytes={self.cache}",
            f"spark.misa.rocksdb.writeBufferSize={self.write_buffer}",
            f"spark.misa.rocksdb.maxWriteBufferNumber={VOLUME_WRITE_BUFFERS}",
        )

    @staticmethod
    def of(cache: int, conf: list[str]) -> VolumeCaches:
        """The caches for ``--volume-cache`` and the shards the bench's ``--conf`` set (checked like a job's)."""
        settings = dict(item.split("=", 1) for item in conf if "=" in item)
        return VolumeCaches(cache, MisaConfig.from_mapping(settings).state_shards)


@dataclass
class RedisSide:
    """YSB's Redis for the whole bench: a private server, reached at ``url`` (through the proxy with
    ``--redis-delay``), loaded with one input's ad -> campaign mapping at a time."""

    server: RedisServer  # started
    url: str
    loaded: Path | None = None

    def load(self, input_folder: Path) -> None:
        """Hold ``input_folder``'s mapping (and nothing else)."""
        if self.loaded == input_folder:
            return
        with self.server.client() as client:
            client.flushdb()
            store_mapping(client, json.loads((input_folder / SIDE_DIR / CAMPAIGNS_FILE).read_text()))
        self.loaded = input_folder


@dataclass
class Environment:
    """Where the bench's runs go and what the regimes add to them."""

    targets: dict[str, str]
    volume: SlowVolume | None = None
    caches: VolumeCaches | None = None
    redis: RedisSide | None = None
    regimes: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the table's header lines

    def conf(self) -> tuple[str, ...]:
        return self.caches.conf() if self.caches else ()
