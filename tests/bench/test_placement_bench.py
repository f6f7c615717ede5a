"""``misa bench placement``'s accounting: whose CPU a process's time is (the bench itself runs on demand)."""

from __future__ import annotations

import subprocess
import sys
import time

from bench import placement

BUSY = "import sys, time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)"


def test_processes_below_an_executor_jvm_are_the_executors_the_rest_the_drivers_by_kind() -> None:
    code = (  # the root's own command line must not hold the executor's main class
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', {BUSY!r}, 'CoarseGrained' + 'ExecutorBackend'])\n"
        f"grandchild = subprocess.Popen([sys.executable, '-c', {BUSY!r}, 'spawn' + '_main'])\n"
        "time.sleep(30)"
    )
    root = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20  # each child's 0.3 s of CPU, however busy the machine's cores are
        while True:
            time.sleep(0.5)
            tree = placement._tree(root.pid)
            usage = placement._usage(tree)
            if usage.executors_s >= 0.25 and usage.driver_s >= 0.25 or time.monotonic() > deadline:
                break
    finally:
        subprocess.run(["pkill", "-P", str(root.pid)])
        root.kill()
    kinds = sorted(kind for kind, _ in tree.values())
    assert kinds == ["driver Python", placement.EXECUTORS, "state worker processes"], tree
    assert usage.executors_s >= 0.25 and usage.driver_s >= 0.25
    assert (usage - placement.Usage({placement.EXECUTORS: 0.1})).executors_s == usage.executors_s - 0.1
    assert placement._kind(b"/usr/bin/java\0-cp\0x") == "driver JVM"
    assert placement._kind(b"python\0-m\0pyspark.daemon") == "driver's Python workers"
