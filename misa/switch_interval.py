"""The Python interpreter's thread switch interval while MiSA runs.

MiSA's background threads (prefetch, commit, checkpoint upload) spend most of their time in
RocksDB and file I/O with the GIL released. When an I/O call returns, the thread needs the GIL back
to hand its result on and start its next call, and Python lets the running thread keep the GIL for
up to the switch interval first: 5 ms by default, long enough for the batch's own Python work (a
state read over thousands of keys) to keep the prefetch threads off the disk for most of the read.
A shorter interval (``spark.misa.python.switchInterval``) hands the GIL over sooner, at the cost of
more frequent switches between threads that both want the CPU.
"""
from __future__ import annotations

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
