"""Ctrl-C on a running query: stop it cleanly instead of tearing the JVM down under it.

By default a SIGINT reaches both processes of a spark-submit job: the JVM starts its shutdown (stopping
the SparkContext under the running batch) while PySpark's handler raises KeyboardInterrupt inside a py4j
call, which prints some 90 lines of tracebacks. While :class:`StopOnInterrupt` is active, the JVM ignores
SIGINT and the first Ctrl-C only asks for the query to stop: a thread calls ``query.stop()``, the caller's
``awaitTermination`` returns, and the caller drains and closes the runtime's commit as usual. A second
Ctrl-C interrupts the driver at once (Python's KeyboardInterrupt).
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import AbstractContextManager, nullcontext
from types import FrameType, TracebackType
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)
#: The exit status of a process ended by SIGINT, as shells report it.
EXIT_INTERRUPTED = 130


class StopOnInterrupt:
    """While active (``with``), Ctrl-C stops the watched query (:meth:`watch`) instead of killing the job.

    Outside the main thread it does nothing (only the main thread receives signals)."""

    _entered = 0  # instances active in the main thread

    @classmethod
    def active(cls) -> bool:
        """Whether one is active (a job's entry point installed its own)."""
        return cls._entered > 0

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self.requested = threading.Event()
        self._queries: list[tuple[StreamingQuery, AbstractContextManager]] = []
        self._lock = threading.Lock()
        self._previous: Any = None
        self._jvm_previous: Any = None

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            StopOnInterrupt._entered += 1
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._jvm_previous = self._jvm_signal(lambda jvm: jvm.sun.misc.SignalHandler.SIG_IGN)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._previous is not None:
            StopOnInterrupt._entered -= 1
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
        if self._jvm_previous is not None:
            self._jvm_signal(lambda _: self._jvm_previous)

    def watch(self, query: StreamingQuery, batch_running: AbstractContextManager | None = None) -> StreamingQuery:
        """Stop ``query`` on Ctrl-C (at once when Ctrl-C came already), after the batch in progress (while
        ``batch_running`` is held: :attr:`StatefulJob.batch_running`) has ended; returns it."""
        with self._lock:
            self._queries.append((query, batch_running or nullcontext()))
        if self.requested.is_set():
            self._stop_queries()
        return query

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.requested.is_set():
            raise KeyboardInterrupt
        self.requested.set()
        # py4j must not be called here: the main thread may be inside a py4j call (awaitTermination)
        threading.Thread(target=self._stop_queries, name="misa-ctrl-c", daemon=True).start()

    def _stop_queries(self) -> None:
        with self._lock:
            queries, self._queries = self._queries, []
        for query, batch_running in queries:
            log.info("Ctrl-C: stopping query %s after its batch (Ctrl-C again to interrupt at once)", query.name)
            with batch_running:  # a batch stopped in its middle fails with Spark's errors in the log
                pass
            query.stop()

    def _jvm_signal(self, handler: Any) -> Any:
        """Set the JVM's SIGINT handler (``handler(jvm)``); its previous one, or None when the JVM has none
        to change (no ``sun.misc.Signal``)."""
        jvm = self.spark._jvm  # type: ignore[attr-defined]
        try:
            return jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal("INT"), handler(jvm))
        except Exception as exc:  # noqa: BLE001 -- then Ctrl-C also stops the JVM, as without this class
            log.warning("cannot keep Spark's JVM from handling Ctrl-C itself: %s", exc)
            return None
