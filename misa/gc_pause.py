"""Pausing Python's cyclic garbage collector during a batch's state phase.

The state cache allocates many small objects per access; a full collection that starts in the
middle of a state read walks every tracked object of the driver and adds tens of milliseconds to
that batch. State entries hold no reference cycles (reference counting frees them), so the state
phase runs with the collector paused and the collection it deferred runs between batches.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector inside the block (if it was enabled), resume it afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
