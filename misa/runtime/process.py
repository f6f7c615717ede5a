"""Process-wide Python settings for a driver that runs MiSA: set by the job entry points, never on import.

* **Thread switch interval.** MiSA's background threads (prefetch, commit, checkpoint upload) spend
  most of their time in RocksDB and file I/O with the GIL released. When an I/O call returns, the
  thread needs the GIL back to hand its result on and start its next call, and Python lets the
  running thread keep the GIL for up to the switch interval first: 5 ms by default, long enough
  for the batch's own Python work (a state read over thousands of keys) to keep the prefetch
  threads off the disk for most of the read. A shorter interval
  (``spark.misa.python.switchInterval``) hands the GIL over sooner.
* **Garbage-collector pause in the state phase.** The state cache allocates many small objects per
  access; a full collection that starts in the middle of a state read walks every tracked object
  of the driver and adds tens of milliseconds to that batch. State entries hold no reference
  cycles, so a job may run its state phase with the collector paused (``StatefulJob(...,
  pause_gc=True)``) and the collection it deferred runs between batches.

Both change the whole interpreter, so the library leaves them alone unless an entry point (a
spark-submit job, a benchmark) asks for them; a shared Spark session keeps its own settings.
"""

from __future__ import annotations

import gc
import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    """Run the block with the thread switch interval set to ``seconds``; restore the previous one after."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


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


@contextmanager
def nothing_paused() -> Iterator[None]:
    """The state phase without a collector pause (a library caller's default)."""
    yield
