"""``misa bench ckpt``: local checkpoint time, upload time and bytes uploaded per version.

For each state size, one store is loaded with N keys (8-byte keys, 32-byte values) and compacted
(a long-running state), then versions are taken after changing 1% and 10% of the keys. Every
version is checkpointed locally once and uploaded to each DFS target in the same run, so the
targets are compared side by side on identical files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from checkpoint import DfsCheckpoints
from common.location import local_location
from misa.config import MisaConfig
from misa.units import human_bytes


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("ckpt", help="checkpoint and upload cost per version against state size")
    p.add_argument("--keys", default="1e5,1e6,5e6", help="comma-separated state sizes in keys")
    p.add_argument("--changes", default="0.01,0.1", help="comma-separated fractions of keys changed per version")
    p.add_argument("--versions", type=int, default=3, help="versions measured per change fraction")
    p.add_argument(
        "--dfs",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="upload target, repeatable (default: local=file://<tmp>)",
    )
    p.add_argument("--work", type=Path, default=None, help="local state directory (default: a temp dir)")
    p.add_argument("--out", type=Path, default=None, help="also write the rows as JSON lines here")
    p.set_defaults(func=run)


def _targets(specs: list[str], scratch: Path) -> dict[str, str]:
    if not specs:
        return {"local": local_location(scratch / "dfs-local").url}
    return dict(spec.split("=", 1) for spec in specs)


def run(args: argparse.Namespace) -> int:
    sizes = [int(float(k)) for k in args.keys.split(",")]
    changes = [float(c) for c in args.changes.split(",")]
    scratch = Path(args.work or tempfile.mkdtemp(prefix="misa-bench-"))
    targets = _targets(args.dfs, scratch)
    config = MisaConfig()
    rows = []
    print(
        f"{'keys':>9} {'change':>7} {'target':>8} {'local ckpt':>11} {'upload':>9} {'uploaded':>11} "
        f"{'state':>11} {'uploaded/state':>15}"
    )
    for n in sizes:
        rows += _bench_size(config, n, changes, args.versions, scratch / f"state-{n}", targets)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if not args.work:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _bench_size(
    config: MisaConfig, n: int, changes: list[float], versions: int, state_dir: Path, targets: dict[str, str]
) -> list[dict]:
    from misa.state.store import StateStore  # noqa: PLC0415  (keeps `misa --help` fast)

    rng = np.random.default_rng(n)
    dfs = {}
    for name, url in targets.items():
        run_url = f"{url.rstrip('/')}/bench-{n}-{time.time_ns()}"
        dfs[name] = DfsCheckpoints(run_url, config.retry_policy(), config.upload_threads)
    rows = []
    shutil.rmtree(state_dir, ignore_errors=True)
    with StateStore(config, state_dir, next(iter(dfs.values())).url) as store:
        keys = encode_keys(np.arange(n))
        store.write(zip(keys, _values(rng, n)))
        store.flush()
        store.compact()  # a long-running state is mostly in its last level
        plan = [(0.0, 1)] + [(c, versions) for c in changes]
        version = 0
        for change, repeat in plan:
            samples: dict[str, list[tuple[float, int]]] = {name: [] for name in dfs}
            local_s: list[float] = []
            for _ in range(repeat):
                if change:
                    picked = rng.choice(n, int(n * change), replace=False)
                    store.write(zip((keys[i] for i in picked), _values(rng, len(picked))))
                local = store.checkpoint(version)
                local_s.append(local.seconds)
                manifests = store.checkpoints.local.manifests(version)
                folders = [store.checkpoints.local.checkpoint_dir(m.shard, version) for m in manifests]
                for name, target in dfs.items():
                    stats = target.upload(version, manifests, folders)
                    samples[name].append((stats.seconds, stats.bytes_uploaded))
                state_bytes = local.total_bytes
                version += 1
            for name, got in samples.items():
                row = {
                    "keys": n,
                    "change": change,
                    "target": name,
                    "versions": repeat,
                    "local_ckpt_s": statistics.mean(local_s),
                    "upload_s": statistics.mean(s for s, _ in got),
                    "bytes_uploaded": statistics.mean(b for _, b in got),
                    "state_bytes": state_bytes,
                }
                rows.append(row)
                print(
                    f"{n:>9} {'full' if not change else f'{change:.0%}':>7} {name:>8} "
                    f"{row['local_ckpt_s'] * 1000:>8.0f} ms {row['upload_s'] * 1000:>6.0f} ms "
                    f"{human_bytes(row['bytes_uploaded']):>11} {human_bytes(state_bytes):>11} "
                    f"{row['bytes_uploaded'] / state_bytes:>15.3f}",
                    flush=True,
                )
    return rows


def encode_keys(ids: np.ndarray) -> list[bytes]:
    """Integer key ids as 8-byte big-endian state keys."""
    raw = ids.astype(">u8").tobytes()
    return [raw[i : i + 8] for i in range(0, len(raw), 8)]


def _values(rng: np.random.Generator, n: int) -> list[bytes]:
    raw = rng.integers(0, 1 << 20, size=(n, 4), dtype=np.int64).astype(">i8").tobytes()
    return [raw[i : i + 32] for i in range(0, len(raw), 32)]
