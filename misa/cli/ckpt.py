"""``misa ckpt``: list, verify, restore and garbage-collect checkpoints on a DFS."""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

from checkpoint import CorruptCheckpointError, DfsCheckpoints
from checkpoint.dfs import MIN_RETAIN, Check, check_retain
from checkpoint.owner import OwnerRecord
from misa.config import MisaConfig
from misa.units import human_bytes


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    ckpt = subparsers.add_parser("ckpt", help="inspect and manage checkpoints on a DFS")
    sub = ckpt.add_subparsers(dest="ckpt_command", required=True)
    p = sub.add_parser("list", help="committed versions with sizes and file counts")
    p.add_argument("url")
    p = sub.add_parser(
        "verify",
        help="check committed versions (--deep: every SHA-256 too); exit 1 on damage",
        description="Check each committed version's marker and manifests, and that every file they name is on "
        "the DFS with its size (from a listing: no file is read). --deep also reads every file back and "
        "compares its SHA-256, which finds damage that keeps the size (a flipped bit) but reads the whole "
        "checkpoint. Exit 1 on damage, and when the location or the version does not exist.",
    )
    p.add_argument("url")
    p.add_argument("version", nargs="?", type=int, help="only this version (default: every committed one)")
    p.add_argument("--deep", action="store_true", help="also read every file and compare its SHA-256")
    p = sub.add_parser("restore", help="download a version into DEST/shard-<s>/ (rocksdict raw-mode DBs)")
    p.add_argument("url")
    p.add_argument("version", type=int)
    p.add_argument("dest", type=Path)
    p = sub.add_parser("gc", help="delete versions beyond the retained ones and orphaned files (stop the job first)")
    p.add_argument("url")
    p.add_argument(
        "--retain",
        type=_retain,
        default=MisaConfig().state_retain_versions,
        help=f"newest readable versions to keep (at least {MIN_RETAIN}; default: spark.misa.state.retainVersions)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help=f"collect even though a version was committed in the last {LIVE_WINDOW_S // 60} minutes (a query may "
        f"still be uploading there: files of its next version are not referenced yet and would be deleted)",
    )
    ckpt.set_defaults(func=run)


#: A location with a commit marker younger than this is taken to have a running query.
LIVE_WINDOW_S = 600


def _retain(text: str) -> int:
    """The ``--retain`` argument: an integer of at least :data:`checkpoint.dfs.MIN_RETAIN`."""
    try:
        return check_retain(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        return _verify(dfs, args.version, Check.DIGESTS if args.deep else Check.SIZES)
    if args.ckpt_command == "restore":
        try:
            manifests = dfs.manifests(args.version)
            dfs.restore(args.version, manifests, [args.dest / f"shard-{m.shard}" for m in manifests])
        except FileNotFoundError:
            print(f"version {args.version} is not committed on {dfs.shown}; see `misa ckpt list {dfs.shown}`")
            return 1
        except (ValueError, CorruptCheckpointError) as exc:
            print(f"cannot restore version {args.version} from {dfs.shown}: {exc}")
            return 1
        print(f"restored version {args.version} ({len(manifests)} shards) into {args.dest}")
        return 0
    if args.ckpt_command == "gc":
        running = None if args.force else _running_query(dfs)
        if running:
            print(f"not collected: {running}")
            return 1
        stats = dfs.gc(args.retain)
        for version, why in stats.damaged.items():
            print(f"DAMAGED version {version} kept, and every data file while it is retained: {why}")
        print(
            f"deleted versions {stats.deleted_versions or 'none'}; "
            f"{stats.deleted_files} unreferenced files ({human_bytes(stats.deleted_bytes)})"
        )
        return 0
    raise AssertionError(args.ckpt_command)


def _running_query(dfs: DfsCheckpoints) -> str | None:
    """Why a query may still be writing to ``dfs`` (its newest marker is recent), or None."""
    newest = dfs.newest_durable()
    if newest is None:
        return None
    age = time.time() - dfs.read_marker(newest).created
    if age >= LIVE_WINDOW_S:
        return None
    owner = OwnerRecord(dfs.fs, dfs.root, dfs.shown).read()
    by = f" by query {owner.query_id} (driver {owner.driver}, epoch {owner.epoch})" if owner else ""
    return (
        f"version {newest} was committed {age:.0f}s ago{by}, so a query may still be writing to {dfs.shown} and "
        f"its next version's files, not yet in a manifest, would be deleted. Stop the query first (its own "
        f"retention runs after every commit), or pass --force."
    )


def _verify(dfs: DfsCheckpoints, version: int | None, check: Check) -> int:
    """``misa ckpt verify``: 0 when every version checked is sound; 1 on damage, and when there is nothing
    to check (no such location, no committed version, no such version)."""
    committed = dfs.committed_versions()
    if not committed:
        print(
            f"nothing verified: {dfs.shown} "
            + ("has no committed versions" if dfs.fs.exists(dfs.root) else "does not exist")
        )
        return 1
    if version is not None and version not in committed:
        print(f"version {version} does not exist on {dfs.shown}; committed versions: {committed}")
        return 1
    versions = committed if version is None else [version]
    problems = dfs.verify(versions, check)
    for problem in problems:
        print(f"DAMAGED {problem}")
    checked = "sizes and SHA-256" if check is Check.DIGESTS else "sizes"
    outcome = "OK" if not problems else f"{len(problems)} problem(s)"
    print(f"verified {len(versions)} version(s) on {dfs.shown} ({checked}): {outcome}")
    return 1 if problems else 0
