"""Fences: a callable that a checkpoint step calls before each file operation.

A commit worker that was replaced (it stayed silent past its heartbeat timeout) must never touch
the store again: its fence raises, which ends the step. Calling the fence also counts as a
heartbeat of the worker. Code that cannot be superseded passes :func:`no_fence`.
"""

from __future__ import annotations

from typing import Callable

Fence = Callable[[], None]


def no_fence() -> None:
    """The fence of a caller that nothing can replace: it never raises."""
