"""Hints of the next batch extracted ahead, between batches (no Spark: the input and the hint job are stand-ins)."""

from __future__ import annotations

import threading

from misa.config import MisaConfig
from misa.runtime.batch_hints import BatchHints
from misa.runtime.next_input import Peek


class LogAdvancingInput:
    """A file source whose next batch (files a, b) is planned by Spark while the driver still looks ahead:
    the look after that sees a and b assigned and the batch after it (c, d) as new."""

    def __init__(self, stop: threading.Event):
        self.looks = [Peek(("a", "b"), "rows of a, b", planned=0), Peek(("c", "d"), "rows of c, d", planned=1)]
        self.stop = stop

    def peek(self, skip: frozenset[str] = frozenset()) -> Peek:
        if len(self.looks) == 1:
            self.stop.set()  # the batch starts after this look
        return self.looks.pop(0) if self.looks else Peek(reason="no new files", planned=1)

    def follow(self, checkpoint: object) -> None:
        pass


def test_hints_ahead_stop_at_the_files_of_the_batch_spark_planned():
    """Without the stop, the look after the planning hinted c and d too (``next_files`` 4 where the batch reads
    2: the flaky test of issue 27), prefetching keys of the batch after next for this one."""
    stop = threading.Event()
    hints = BatchHints(MisaConfig(), operator=None, stages=[lambda df: df], manager=None, next_input=None)
    hints.next_input = LogAdvancingInput(stop)
    hints.POLL_S = 0.0
    extracted: list[str] = []
    hints._frame = lambda rows, stage: rows  # type: ignore[method-assign]
    hints._extract = lambda frame, stage: extracted.append(frame) or {"rows": 2, "hot_skipped": 0, "hinted": 2}  # type: ignore[method-assign]
    found = hints._extract_ahead(lambda rows: rows, 0, stop)
    assert extracted == ["rows of a, b"]
    assert found["next_files"] == 2 and found["rows"] == 2
    hints.close()
