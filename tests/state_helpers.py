"""Small helpers shared by the state and checkpoint tests."""

from __future__ import annotations

import random

from misa.state.store import StateStore


def key(i: int) -> bytes:
    return i.to_bytes(8, "big")


def fill(store: StateStore, n: int, seed: int, start: int = 0) -> dict[bytes, bytes]:
    """Put ``n`` keys from ``start`` with seeded random values; return what was written."""
    rng = random.Random(seed)
    data = {key(i): rng.randbytes(rng.randint(1, 40)) for i in range(start, start + n)}
    store.write(data.items())
    return data


def contents(store: StateStore) -> dict[bytes, bytes]:
    return dict(store.scan())
