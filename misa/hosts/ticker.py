"""A background thread that calls a function at a fixed interval (the state hosts' upkeep between batches)."""

from __future__ import annotations

import logging
import threading
from typing import Callable

log = logging.getLogger(__name__)


class Ticker:
    """Calls ``tick`` every ``every_s`` seconds in a daemon thread named ``name``, until :meth:`stop` or until ``tick``
    returns False; a tick that raises is logged and the next one runs."""

    def __init__(self, tick: Callable[[], bool], every_s: float, name: str):
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(tick, every_s), name=name, daemon=True)
        self._thread.start()

    def _run(self, tick: Callable[[], bool], every_s: float) -> None:
        while not self._stopped.wait(every_s):
            try:
                if not tick():
                    return
            except Exception:  # noqa: BLE001 - the next tick tries again; the batches see a real failure themselves
                log.debug("%s: a tick failed", self._thread.name, exc_info=True)

    def stop(self) -> None:
        """No tick after the running one."""
        self._stopped.set()
