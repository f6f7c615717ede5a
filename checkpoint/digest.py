"""Content digests of checkpoint files, computed while the bytes stream past."""

from __future__ import annotations

import hashlib
from typing import BinaryIO

CHUNK = 4 << 20


def new_hasher() -> hashlib._Hash:
    """The hash every checkpoint file is named and verified by."""
    return hashlib.sha256()


def copy_and_digest(src: BinaryIO, dst: BinaryIO | None) -> tuple[int, str]:
    """Copy ``src`` to ``dst`` (if given) in chunks; return (bytes, hex digest)."""
    hasher, size = new_hasher(), 0
    while chunk := src.read(CHUNK):
        hasher.update(chunk)
        size += len(chunk)
        if dst is not None:
            dst.write(chunk)
    return size, hasher.hexdigest()


def file_digest(path: str) -> tuple[int, str]:
    """Size and digest of a local file."""
    with open(path, "rb") as src:
        return copy_and_digest(src, None)
