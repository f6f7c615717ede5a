"""A batch's hint session and the next batch's hints extracted ahead (no Spark: input and hint job are stand-ins)."""

from __future__ import annotations

import threading
import time

import pytest

from misa.config import MisaConfig
from misa.runtime.batch_hints import BatchHints, HintSession
from misa.runtime.next_input import Peek
from prefetch.lookahead import AHEAD, IN_BATCH
from prefetch.manager import PrefetchStats


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


class Batch:
    """A stand-in for the batch's DataFrame: records whether it is persisted."""

    def __init__(self, name: str):
        self.name, self.persisted = name, False

    def persist(self) -> Batch:
        self.persisted = True
        return self

    def unpersist(self) -> Batch:
        self.persisted = False
        return self


class Manager:
    """A stand-in prefetch manager: no prefetches."""

    def take_stats(self) -> PrefetchStats:
        return PrefetchStats()


class ArrivingInput:
    """A file source whose next batch's one file (``a``) has arrived; Spark plans nothing meanwhile."""

    def peek(self, skip: frozenset[str] = frozenset()) -> Peek:
        return Peek(reason="no new files") if "a" in skip else Peek(("a",), "rows of a")

    def follow(self, checkpoint: object) -> None:
        pass


@pytest.fixture
def hints():
    """Batch hints whose extraction records what it read instead of running a hint job."""
    hints = BatchHints(MisaConfig(), operator=None, stages=[lambda df: df], manager=Manager(), next_input=None)
    hints.POLL_S = 0.01
    hints.extracted = []
    hints._frame = lambda rows, stage: rows
    hints._extract = lambda frame, stage: hints.extracted.append(frame) or {  # type: ignore[method-assign]
        "source": IN_BATCH, "stage": stage, "rows": 1, "hot_skipped": 0, "hinted": 1
    }  # fmt: skip
    yield hints
    hints.close()


def wait_ahead(hints: BatchHints) -> None:
    """Wait until the extraction ahead has hinted a file of the next batch."""
    deadline = time.monotonic() + 5
    while not hints._ahead_found() and time.monotonic() < deadline:
        time.sleep(0.01)


def good(rows):
    return f"good {rows.name}" if isinstance(rows, Batch) else f"good {rows}"


def test_a_batch_without_hints_ahead_extracts_its_own_from_its_persisted_rows(hints):
    batch = Batch("b1")
    with hints.begin(batch, good, on=True) as session:
        assert session.on and not session.ahead
        assert session.rows is batch and batch.persisted  # the hint job and the delta job both read it
        session.wait()
        record = session.finish()
        session.start_next(True)  # the source cannot be peeked: nothing starts
    assert not batch.persisted
    assert hints.extracted == ["good b1"]
    assert (record["source"], record["next_unavailable"]) == (IN_BATCH, "source not peekable")
    assert record["prefetched"] == 0 and {"next_stage", "next_source"} <= record.keys()


def test_hints_found_ahead_spare_the_batch_its_hint_job(hints):
    hints.next_input = ArrivingInput()
    with hints.begin(Batch("b1"), good, on=True) as first:
        first.wait()
        first.finish()
        first.start_next(True)  # the driver waits for the trigger: the next batch's file is hinted meanwhile
        wait_ahead(hints)
    batch = Batch("b2")
    with hints.begin(batch, good, on=True) as second:
        assert second.ahead and not batch.persisted  # read once, by the delta job
        second.wait()
        record = second.finish()
    assert hints.extracted == ["good b1", "good rows of a"]  # b2's rows were not read for hints
    assert (record["source"], record["next_files"]) == (AHEAD, 1)


def test_a_batch_without_prefetching_has_no_hint_job_but_may_start_the_next_batchs(hints):
    hints.next_input = ArrivingInput()
    batch = Batch("b1")
    with hints.begin(batch, good, on=False) as session:
        assert not session.on and not batch.persisted
        session.wait()
        assert session.finish() is None
        session.start_next(True)  # prefetching is turned on for the next batch
        wait_ahead(hints)
    assert hints.extracted == ["good rows of a"]


def test_a_job_without_hints_has_a_session_that_does_nothing():
    batch = Batch("b1")
    with HintSession(batch) as session:
        assert session.rows is batch and not session.on and not batch.persisted
        session.wait()
        assert session.finish() is None
        session.start_next(True)


@pytest.mark.parametrize(
    "calls",
    [("finish",), ("start_next",), ("wait", "start_next"), ("wait", "wait"), ("wait", "finish", "finish")],
)
def test_a_call_out_of_order_raises(hints, calls):
    with hints.begin(Batch("b1"), good, on=True) as session:
        *before, wrong = calls
        for call in before:
            getattr(session, call)(*([True] if call == "start_next" else []))
        with pytest.raises(RuntimeError, match=f"{wrong}\\(\\) after"):
            getattr(session, wrong)(*([True] if wrong == "start_next" else []))


def test_a_session_is_closed_before_the_next_begins_and_is_done_once_closed(hints):
    first = hints.begin(Batch("b1"), good, on=True)
    with pytest.raises(RuntimeError, match="previous one was closed"):
        hints.begin(Batch("b2"), good, on=True)
    first.close()
    with pytest.raises(RuntimeError, match=r"wait\(\) after closed"):
        first.wait()
    with hints.begin(Batch("b2"), good, on=True) as second:
        second.wait()
