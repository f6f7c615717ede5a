"""Many storage calls at once: each waits on a round trip, so they overlap on a few threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def parallel_map(fn: Callable[[T], R], items: Sequence[T], threads: int, name: str) -> list[R]:
    """``fn`` over ``items`` on up to ``threads`` threads named ``name``, results in order (the first error is
    raised); inline for a single item or thread."""
    if len(items) <= 1 or threads <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix=name) as pool:
        return list(pool.map(fn, items))
