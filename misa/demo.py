"""``misa demo``: the state store and its checkpoints end to end, until the main job exists.

Each batch counts random keyed events into the state (multi-get, merge with NumPy, chunked
write), checkpoints it locally (ack 1) and uploads it to a ``file://`` DFS (ack 2). At the end the
newest version is restored from the DFS into a fresh store and compared with an in-memory
reference, and every version on the DFS is verified.
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from .config import MisaConfig
from .state_store import StateStore
from .units import human_bytes, ms


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="count keyed events through the state store, checkpoint, restore, verify")
    p.add_argument("--dir", type=Path, default=Path("runs/demo"), help="working directory (wiped first)")
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--rows", type=int, default=50_000, help="events per batch")
    p.add_argument("--keys", type=int, default=200_000, help="size of the key space")
    p.add_argument("--seed", type=int, default=7)
    p.set_defaults(func=run)


def encode_keys(ids: np.ndarray) -> list[bytes]:
    raw = ids.astype(">u8").tobytes()
    return [raw[i : i + 8] for i in range(0, len(raw), 8)]


def run(args: argparse.Namespace) -> int:
    shutil.rmtree(args.dir, ignore_errors=True)
    dfs_url = f"file://{(args.dir / 'dfs').resolve()}"
    config = MisaConfig.from_mapping({"spark.misa.state.retainVersions": "5"})
    rng = np.random.default_rng(args.seed)
    reference: dict[bytes, int] = {}
    print(f"state in {args.dir / 'state'}, DFS {dfs_url}")
    print(f"{'batch':>5} {'rows':>7} {'keys':>7} {'state':>8} {'merge':>8} {'ckpt':>8} {'upload':>8} "
          f"{'uploaded':>10} {'reused':>10}")
    with StateStore(config, args.dir / "state", dfs_url) as store:
        for batch in range(args.batches):
            started = time.monotonic()
            ids, counts = np.unique(rng.zipf(1.3, args.rows) % args.keys, return_counts=True)
            keys = encode_keys(ids)
            old = np.array([int.from_bytes(v, "big") if v else 0 for v in store.get_many(keys)], dtype=np.int64)
            new = old + counts
            store.write(zip(keys, (int(n).to_bytes(8, "big") for n in new)))
            merge_s = time.monotonic() - started
            for key, n in zip(keys, new.tolist()):
                reference[key] = n
            local = store.checkpoint(batch, {"batch": batch})
            upload = store.upload(batch)
            print(f"{batch:>5} {args.rows:>7} {len(keys):>7} {len(reference):>8} {ms(merge_s):>8} "
                  f"{ms(local.seconds):>8} {ms(upload.seconds):>8} {human_bytes(upload.bytes_uploaded):>10} "
                  f"{human_bytes(upload.bytes_reused):>10}")
    with tempfile.TemporaryDirectory() as fresh, StateStore(config, fresh, dfs_url) as restored:
        newest = restored.checkpoints.newest_durable()
        assert newest is not None
        result = restored.load(newest)
        state = {k: int.from_bytes(v, "big") for k, v in restored.scan()}
        problems = restored.checkpoints.dfs.verify()
        versions = restored.checkpoints.dfs.committed_versions()
    same = state == reference
    print(f"restored version {newest} from the {result.source if result else '?'}: {len(state)} keys, "
          f"{'equal to' if same else 'DIFFERENT FROM'} the reference")
    print(f"DFS keeps versions {versions}; verify: {'OK' if not problems else problems}")
    return 0 if same and not problems else 1
