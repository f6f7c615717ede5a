"""One local cluster registers its application at a time, among every process on this machine.

Spark names a standalone application by the second its master registered it (``app-YYYYMMDDHHMMSS-0000``, and every
local cluster's master counts from 0), and a local cluster's executors work in ``pyspark/work/APP-ID/N``. Two local
clusters started within one second (two soak processes side by side) so share their executors' folders, and one run's
end, which moves its folder away with the executors' logs, pulls the other's executors' working directory from under
them: their Python workers fail with ``FileNotFoundError`` on import. Holding this lock from a run's launch until its
application is named, and a second more, keeps every name apart.
"""

from __future__ import annotations

import fcntl
import re
import subprocess
import time
from pathlib import Path
from typing import Callable

import pyspark

APP_ID = re.compile(r"app-\d{14}-\d{4}")
LOCK = Path(pyspark.__file__).parent / "work" / ".misa-cluster-start.lock"


def start_named_apart(start: Callable[[], subprocess.Popen], log: Path, timeout_s: float = 120.0) -> subprocess.Popen:
    """``start()`` a driver that writes ``log``, holding the machine's cluster-start lock until the driver names its
    application (or ends, or ``timeout_s`` passes) and one second more; the driver's process."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            proc = start()
            deadline = time.monotonic() + timeout_s
            while proc.poll() is None and time.monotonic() < deadline:
                if APP_ID.search(log.read_text(errors="replace")):
                    break
                time.sleep(0.2)
            time.sleep(1.0)
            return proc
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
