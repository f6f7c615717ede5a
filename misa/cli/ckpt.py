"""``misa ckpt``: list, verify, restore and garbage-collect checkpoints on a DFS."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from checkpoint import DfsCheckpoints
from checkpoint.dfs import MIN_RETAIN, Check, check_retain
from checkpoint.exceptions import CorruptCheckpointError, DfsUnavailableError
from checkpoint.owner import OwnerRecord
from common.location import Location, parse
from misa.config import STATE_FOLDER, MisaConfig
from misa.exceptions import CommandError
from misa.parallel.layout import partition_dfs_urls, partitions_file
from misa.units import human_bytes

URL_HELP = (
    "the state's DFS copy (a path or an fsspec URL: file://, s3://, gs://, abfs://, hdfs://), or the Spark "
    f"checkpoint location whose {STATE_FOLDER} folder holds it"
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    ckpt = subparsers.add_parser(
        "ckpt",
        help="inspect and manage checkpoints on a DFS",
        description="Inspect and manage the state's durable copy. URL is that copy, or a Spark checkpoint "
        f"location whose {STATE_FOLDER} folder holds it (the default place). Errors: one line on stderr; exit 1 "
        "when the location, a version or a committed version's files are missing or damaged, 2 for a bad URL "
        "or option (a missing backend names the pip extra that installs it).",
    )
    sub = ckpt.add_subparsers(dest="ckpt_command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "list",
        help="committed versions with sizes and file counts",
        description="Committed versions: shards, files, total and new bytes, time of the commit.",
    )
    p.add_argument("url", metavar="URL", help=URL_HELP)
    p = sub.add_parser(
        "verify",
        help="check committed versions (--deep: every SHA-256 too); exit 1 on damage",
        description="Check each committed version's marker and manifests, and that every file they name is on "
        "the DFS with its size (from a listing: no file is read). --deep also reads every file back and "
        "compares its SHA-256, which finds damage that keeps the size (a flipped bit) but reads the whole "
        "checkpoint. Exit 1 on damage, and when the location or the version does not exist.",
    )
    p.add_argument("url", metavar="URL", help=URL_HELP)
    p.add_argument("version", metavar="VERSION", nargs="?", type=int, help="only this version (default: every one)")
    p.add_argument("--deep", action="store_true", help="also read every file and compare its SHA-256")
    p = sub.add_parser(
        "restore",
        help="download a version into DEST/shard-<s>/ (rocksdict raw-mode DBs)",
        description="Download a committed version's shards into DEST/shard-<s>/, each a RocksDB database that "
        "rocksdict opens in raw mode.",
    )
    p.add_argument("url", metavar="URL", help=URL_HELP)
    p.add_argument("version", metavar="VERSION", type=int, help="a committed version (see misa ckpt list)")
    p.add_argument("dest", metavar="DEST", type=Path, help="local folder to write the shards into")
    p = sub.add_parser(
        "gc",
        help="delete versions beyond the retained ones and orphaned files (stop the job first)",
        description="Keep the newest --retain readable versions and the files they reference; delete older "
        "versions and orphaned files of interrupted uploads. Refused while a query may still be writing.",
    )
    p.add_argument("url", metavar="URL", help=URL_HELP)
    p.add_argument(
        "--retain",
        type=_retain,
        metavar="N",
        default=MisaConfig().state_retain_versions,
        help=f"newest readable versions to keep, at least {MIN_RETAIN} (default: spark.misa.state.retainVersions, "
        "%(default)s)",
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


def _dfs(location: Location) -> DfsCheckpoints:
    location.filesystem()  # a LocationError naming the fix when no file system serves the URL
    config = MisaConfig()
    return DfsCheckpoints(location.url, config.retry_policy(), config.upload_threads)


def open_checkpoints(url: str) -> tuple[DfsCheckpoints, list[int]]:
    """The durable copy at ``url`` and its committed versions, or at ``url``'s ``misa-state`` folder when
    ``url`` is a Spark checkpoint location; a :class:`CommandError` saying where it looked when neither
    holds a committed version."""
    given = parse(url)
    dfs = _dfs(given)
    committed = _committed(dfs)
    if committed:
        return dfs, committed
    inner = _dfs(given.child(STATE_FOLDER))
    committed = _committed(inner)
    if committed:
        print(f"state of Spark checkpoint {dfs.shown}: {inner.shown}", file=sys.stderr)
        return inner, committed
    if not dfs.fs.exists(dfs.root):
        raise CommandError(f"{dfs.shown} does not exist")
    raise CommandError(f"no committed versions in {dfs.shown} nor in {inner.shown}")


def _committed(dfs: DfsCheckpoints) -> list[int]:
    """The committed versions on ``dfs``; the first error of its backend (credentials, network), which
    retries did not help, as a :class:`CommandError` naming the location."""
    try:
        return dfs.committed_versions()
    except DfsUnavailableError:
        raise
    except Exception as exc:
        cause = (str(exc).splitlines() or [""])[0]
        raise CommandError(f"cannot read {dfs.shown}: {type(exc).__name__}: {cause}") from exc


def require_version(dfs: DfsCheckpoints, committed: list[int], version: int) -> None:
    """A :class:`CommandError` naming the committed versions when ``version`` is not one of them."""
    if version not in committed:
        raise CommandError(
            f"version {version} does not exist; versions on {dfs.shown}: {', '.join(map(str, committed))}"
        )


def run(args: argparse.Namespace) -> int:
    """``misa ckpt COMMAND``; over a state of several key partitions (``spark.misa.state.processes``), the command
    for each partition in turn (``restore`` into ``DEST/partition-<i>/``); the exit status is the worst."""
    partitions = partition_urls(args.url)
    if not partitions:
        return _run_on(args, args.url, getattr(args, "dest", None))
    status = 0
    for index, url in enumerate(partitions):
        print(f"partition {index}: {url}")
        dest = args.dest / f"partition-{index}" if getattr(args, "dest", None) else None
        status = max(status, _run_on(args, url, dest))
    return status


def partition_urls(url: str) -> list[str]:
    """The DFS locations of the partitions of a state written by worker processes or state hosts (its recorded
    partition count, one host's included), at ``url`` or at its ``misa-state`` folder; empty for a state written in
    the driver's own process."""
    given = parse(url)
    for location in (given, given.child(STATE_FOLDER)):
        _dfs(location)  # a LocationError naming the fix when no file system serves the URL
        try:
            count = partitions_file(location.url)
        except Exception:  # noqa: BLE001 - an unreadable location: reading its versions reports why, in one line
            return []
        if count is not None:
            return partition_dfs_urls(location.url, count)
    return []


def _run_on(args: argparse.Namespace, url: str, dest: Path | None) -> int:
    """The command on one store's durable copy at ``url``."""
    dfs, committed = open_checkpoints(url)
    if args.ckpt_command == "list":
        infos = dfs.list_versions()
        print(f"{'version':>8} {'shards':>6} {'files':>6} {'size':>11} {'new':>11}  created")
        for i in infos:
            created = dt.datetime.fromtimestamp(i.created).isoformat(timespec="seconds")
            print(
                f"{i.version:>8} {i.shards:>6} {i.files:>6} {human_bytes(i.total_bytes):>11} "
                f"{human_bytes(i.new_bytes):>11}  {created}"
            )
        return 0
    if args.ckpt_command == "verify":
        return _verify(dfs, committed, args.version, Check.DIGESTS if args.deep else Check.SIZES)
    if args.ckpt_command == "restore":
        require_version(dfs, committed, args.version)
        try:
            manifests = dfs.manifests(args.version)
            dfs.restore(args.version, manifests, [dest / f"shard-{m.shard}" for m in manifests])
        except (ValueError, FileNotFoundError, CorruptCheckpointError) as exc:
            raise CommandError(f"cannot restore version {args.version} from {dfs.shown}: {exc}") from exc
        print(f"restored version {args.version} ({len(manifests)} shards) into {dest}")
        return 0
    if args.ckpt_command == "gc":
        running = None if args.force else _running_query(dfs)
        if running:
            raise CommandError(f"not collected: {running}")
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


def _verify(dfs: DfsCheckpoints, committed: list[int], version: int | None, check: Check) -> int:
    """``misa ckpt verify``: 0 when every version checked is sound; 1 on damage."""
    if version is not None:
        require_version(dfs, committed, version)
    versions = committed if version is None else [version]
    problems = dfs.verify(versions, check)
    for problem in problems:
        print(f"DAMAGED {problem}")
    checked = "sizes and SHA-256" if check is Check.DIGESTS else "sizes"
    outcome = "OK" if not problems else f"{len(problems)} problem(s)"
    print(f"verified {len(versions)} version(s) on {dfs.shown} ({checked}): {outcome}")
    return 1 if problems else 0
