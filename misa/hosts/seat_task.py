"""What a task of the hosts' job does first, before it imports the state's modules: it asks the driver whether it
serves (:mod:`.seats`). One that leaves ends at once and frees its task slot for the query's tasks (after an
executor loss the survivors' slots are few, and importing the state's modules takes seconds on a busy executor);
one that serves runs :func:`~misa.hosts.host_task.serve_host`."""

from __future__ import annotations

import pickle
from multiprocessing.connection import Client
from typing import Any, Iterator


def run_task(registry: tuple[str, int], key: bytes, launch: bytes, rows: Iterator[int]) -> Iterator[Any]:
    """The task's body (``mapPartitions`` over the hosts' job's task numbers, one each): ask the driver's
    ``registry`` (with the launch's ``key``) whether this task serves; if so, serve its partition of the pickled
    ``launch`` until closed."""
    task = next(iter(rows))
    with Client(registry, authkey=key) as driver:
        driver.send(("starting", task))
        serves = bool(driver.recv())
    if not serves:
        return iter(())
    from misa.hosts.host_task import serve_host  # the state's modules, in a task that serves only

    return serve_host(pickle.loads(launch), task)
