"""``misa ckpt``: list, verify, restore and garbage-collect checkpoints on a DFS."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from checkpoint import CorruptCheckpointError, DfsCheckpoints
from misa.config import MisaConfig
from misa.units import human_bytes


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    ckpt = subparsers.add_parser("ckpt", help="inspect and manage checkpoints on a DFS")
    sub = ckpt.add_subparsers(dest="ckpt_command", required=True)
    p = sub.add_parser("list", help="committed versions with sizes and file counts")
    p.add_argument("url")
    p = sub.add_parser("verify", help="check sizes and checksums; exit 1 on damage")
    p.add_argument("url")
    p.add_argument("version", nargs="?", type=int)
    p = sub.add_parser("restore", help="download a version into DEST/shard-<s>/ (rocksdict raw-mode DBs)")
    p.add_argument("url")
    p.add_argument("version", type=int)
    p.add_argument("dest", type=Path)
    p = sub.add_parser("gc", help="delete versions beyond the retained ones and orphaned files (stop the job first)")
    p.add_argument("url")
    p.add_argument("--retain", type=int, default=MisaConfig().state_retain_versions)
    ckpt.set_defaults(func=run)


def _dfs(url: str) -> DfsCheckpoints:
    config = MisaConfig()
    return DfsCheckpoints(url, config.retry_policy(), config.upload_threads)


def run(args: argparse.Namespace) -> int:
    dfs = _dfs(args.url)
    if args.ckpt_command == "list":
        infos = dfs.list_versions()
        print(f"{'version':>8} {'shards':>6} {'files':>6} {'size':>11} {'new':>11}  created")
        for i in infos:
            created = dt.datetime.fromtimestamp(i.created).isoformat(timespec="seconds")
            print(
                f"{i.version:>8} {i.shards:>6} {i.files:>6} {human_bytes(i.total_bytes):>11} "
                f"{human_bytes(i.new_bytes):>11}  {created}"
            )
        if not infos:
            print(f"no committed versions under {dfs.shown}")
        return 0
    if args.ckpt_command == "verify":
        versions = [args.version] if args.version is not None else dfs.committed_versions()
        problems = dfs.verify(versions)
        for problem in problems:
            print(f"DAMAGED {problem}")
        print(
            f"verified {len(versions)} version(s) on {dfs.shown}: "
            + ("OK" if not problems else f"{len(problems)} problem(s)")
        )
        return 1 if problems else 0
    if args.ckpt_command == "restore":
        try:
            manifests = dfs.manifests(args.version)
            for manifest in manifests:
                dfs.restore_shard(args.version, manifest, args.dest / f"shard-{manifest.shard}")
        except FileNotFoundError:
            print(f"version {args.version} is not committed on {dfs.shown}; see `misa ckpt list {dfs.shown}`")
            return 1
        except (ValueError, CorruptCheckpointError) as exc:
            print(f"cannot restore version {args.version} from {dfs.shown}: {exc}")
            return 1
        print(f"restored version {args.version} ({len(manifests)} shards) into {args.dest}")
        return 0
    if args.ckpt_command == "gc":
        stats = dfs.gc(args.retain)
        print(
            f"deleted versions {stats.deleted_versions or 'none'}; "
            f"{stats.deleted_files} unreferenced files ({human_bytes(stats.deleted_bytes)})"
        )
        return 0
    raise AssertionError(args.ckpt_command)
