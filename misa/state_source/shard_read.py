"""One shard of one version, read where Spark runs the read's task: its files downloaded from the DFS copy into a
private temporary folder (each checked against the manifest's SHA-256), opened read-only, its entries given in
key order in chunks, the folder removed afterwards. Nothing is written to the state's own locations."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import rocksdict

from checkpoint.exceptions import CorruptCheckpointError
from checkpoint.manifest import ShardManifest
from misa.exceptions import StateSourceError
from misa.state_source.locate import dfs

Entries = tuple[list[bytes], list[bytes]]


@contextmanager
def opened_shard(url: str, manifest: ShardManifest) -> Iterator[rocksdict.Rdict]:
    """The shard ``manifest`` describes (of the store at ``url``), downloaded and opened read-only."""
    folder = Path(tempfile.mkdtemp(prefix="misa-state-read-"))
    try:
        try:
            dfs(url).restore(manifest.version, [manifest], [folder / "db"])
        except CorruptCheckpointError as exc:
            raise StateSourceError(str(exc).splitlines()[0]) from exc
        except FileNotFoundError as exc:
            raise StateSourceError(
                f"a file of version {manifest.version} (shard {manifest.shard}) of {dfs(url).shown} is gone ({exc}): "
                "the version was removed while it was read (retention keeps the newest); read a newer version"
            ) from exc
        db = rocksdict.Rdict(
            str(folder / "db"), options=rocksdict.Options(raw_mode=True), access_type=rocksdict.AccessType.read_only()
        )
        try:
            yield db
        finally:
            db.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def entries(db: rocksdict.Rdict, begin: bytes, end: bytes | None, chunk: int) -> Iterator[Entries]:
    """The entries with ``begin`` <= key < ``end``, in key order, ``chunk`` at a time."""
    options = rocksdict.ReadOptions()
    if end is not None:
        options.set_iterate_upper_bound(end)
    items = db.items(from_key=begin, read_opt=options)
    while True:
        part = list(itertools.islice(items, chunk))
        if not part:
            return
        yield [k for k, _ in part], [v for _, v in part]
