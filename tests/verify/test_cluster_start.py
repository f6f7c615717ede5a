"""Two local clusters never register their applications within one second (they would share their executors'
folders under pyspark/work): two soak processes' launches wait for each other."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from verify.cluster_start import start_named_apart

DRIVER = (
    "import time; time.sleep(0.3); print('Connected with app ID app-20261130080040-0000', flush=True); time.sleep(3)"
)


def test_the_second_launch_waits_until_the_first_application_is_named_and_a_second_more(tmp_path: Path):
    named: list[float] = []
    started: list[float] = []

    def launch(i: int) -> None:
        log = tmp_path / f"run-{i}.log"
        with log.open("w") as out:

            def start() -> subprocess.Popen:
                started.append(time.monotonic())
                return subprocess.Popen([sys.executable, "-c", DRIVER], stdout=out)

            proc = start_named_apart(start, log)
            named.append(time.monotonic())
            proc.kill()
            proc.wait()

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(started) == 2 and len(named) == 2
    assert started[1] - started[0] >= 1.3  # the first driver's name (0.3 s) and the second after it
    assert started[1] >= named[0] - 0.05


def test_a_driver_that_ends_before_naming_its_application_releases_the_lock(tmp_path: Path):
    log = tmp_path / "run.log"
    with log.open("w") as out:
        begun = time.monotonic()
        proc = start_named_apart(lambda: subprocess.Popen([sys.executable, "-c", "pass"], stdout=out), log)
    assert proc.wait() == 0 and time.monotonic() - begun < 10
