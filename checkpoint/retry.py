"""Bounded retries with exponential backoff and jitter (tenacity) for DFS operations."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

import tenacity

from common.location import redact

from .exceptions import CorruptCheckpointError, DfsUnavailableError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failing DFS call."""

    max_attempts: int = 5
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 10.0
    jitter_s: float = 0.2

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn``, retrying transient errors; raise :class:`DfsUnavailableError` when exhausted."""
        started = time.monotonic()
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_attempts),
            wait=tenacity.wait_exponential_jitter(
                multiplier=self.initial_backoff_s, max=self.max_backoff_s, jitter=self.jitter_s
            ),
            retry=tenacity.retry_if_exception(is_transient),
            before_sleep=lambda state: log.warning(
                "%s failed (attempt %d/%d): %s; retrying",
                redact(what),
                state.attempt_number,
                self.max_attempts,
                redact(str(state.outcome.exception())),
            ),
            reraise=False,
        )
        try:
            return retrying(fn)
        except tenacity.RetryError as exc:
            cause = exc.last_attempt.exception()
            raise DfsUnavailableError(
                redact(
                    f"{what} failed after {self.max_attempts} attempts in {time.monotonic() - started:.1f}s: "
                    f"{type(cause).__name__}: {cause}. Check that the DFS is reachable and writable; raise "
                    f"spark.misa.checkpoint.retry.maxAttempts to wait longer."
                )
            ) from None


def is_transient(exc: BaseException) -> bool:
    """I/O errors and checksum mismatches may pass; a missing file or a programming error does not."""
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return False
    return isinstance(exc, (OSError, ConnectionError, TimeoutError, CorruptCheckpointError))
