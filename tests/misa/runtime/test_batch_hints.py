"""Hints of the next batch extracted ahead, between batches (no Spark: the input and the hint job are stand-ins)."""

from __future__ import annotations

import logging
import threading
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from misa.config import MisaConfig
from misa.runtime.batch_hints import BatchHints, supports_hints
from misa.runtime.next_input import Peek
from prefetch.cache import StateCache
from prefetch.hints import HINT_COUNT, HINT_HASH, HINT_HOT, HINT_TS, HINT_WINDOW_END
from prefetch.lookahead import AHEAD, IN_BATCH
from prefetch.manager import PrefetchManager, PrefetchStats


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


# ----------------------------------------------------------------------- hint extraction (no Spark)
class Operator:
    """A hint source whose state key is column ``k``; the hint timestamp is the rows' latest event time."""

    def hint_spec(self) -> None:
        return None

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        return [k.encode() for k in hints["k"].to_pylist()], hints[HINT_TS].to_numpy()


class Frame:
    """What the hint job gives back (``toArrow``), without Spark."""

    def __init__(self, table: pa.Table):
        self.table = table

    def toArrow(self) -> pa.Table:  # noqa: N802 (Spark's name)
        return self.table


def hint_rows(rows: list[tuple[str, int, int, int, bool]]) -> Frame:
    """rows: (key, hash, window end, count, hot); each key's hint time is 100 + its count."""
    keys, hashes, ends, counts, hot = zip(*rows)
    return Frame(
        pa.table(
            {
                "k": list(keys),
                HINT_HASH: pa.array(hashes, pa.int64()),
                HINT_WINDOW_END: pa.array(ends, pa.int64()),
                HINT_COUNT: pa.array(counts, pa.int64()),
                HINT_TS: pa.array([100 + c for c in counts], pa.int64()),
                HINT_HOT: pa.array(hot),
            }
        )
    )


@pytest.fixture
def manager():
    """A real prefetch manager over a dict: fetching a key gives its name upper-cased."""
    m = PrefetchManager(StateCache(1 << 20, "tac"), lambda keys: [k.upper() for k in keys], lambda key: 0, 1, 8)
    yield m
    m.close()


def batch_hints(manager, stages: int = 1, next_input=None, **conf: str) -> BatchHints:
    config = MisaConfig.from_mapping({f"spark.misa.{k}": v for k, v in conf.items()})
    return BatchHints(config, Operator(), [lambda df: df] * stages, manager, next_input)  # type: ignore[arg-type]


def test_hot_keys_are_counted_not_hinted_and_the_sketch_counts_each_keys_largest_window(manager):
    hints = batch_hints(manager)
    frame = hint_rows([("a", 1, 10, 3, False), ("a", 1, 10, 2, False), ("a", 1, 20, 4, False), ("b", 2, 10, 7, True)])
    found = hints._extract(frame, 0)
    assert {k: found[k] for k in ("source", "stage", "rows", "hot_skipped", "hinted")} == {
        "source": IN_BATCH,
        "stage": 0,
        "rows": 4,
        "hot_skipped": 1,
        "hinted": 3,
    }
    assert hints.sketch.estimate(np.array([1, 2, 3], np.int64)).tolist() == [5, 7, 0]  # a: max(3 + 2, 4)
    manager.quiesce()
    assert manager.take_stats().hints == 3 and manager.read([b"a"], 200) == [b"A"]
    hints.close()


def test_a_batch_without_hints_ahead_runs_its_own_hint_job_and_says_why(manager):
    for next_input, conf, reason in [
        (None, {}, "source not peekable"),
        (LogAdvancingInput(threading.Event()), {"prefetch.nextBatch": "false"}, "spark.misa.prefetch.nextBatch=false"),
        (LogAdvancingInput(threading.Event()), {}, "no extraction ahead"),
    ]:
        hints = batch_hints(manager, next_input=next_input, **conf)
        hints._frame = lambda rows, stage: rows  # type: ignore[method-assign]
        found = hints.start(hint_rows([("a", 1, 10, 1, False), ("b", 2, 10, 1, True)])).result(timeout=10)
        assert (found["source"], found["next_unavailable"], found["rows"], found["hinted"]) == (
            IN_BATCH,
            reason,
            2,
            1,
        )
        assert not hints.ahead_found()
        hints.close()


def test_hints_found_ahead_spare_the_batch_its_hint_job(manager):
    stop = threading.Event()
    hints = batch_hints(manager)
    hints.next_input = LogAdvancingInput(stop)
    hints.POLL_S = 0.0
    framed: list[object] = []

    def frame(rows, stage):
        framed.append(rows)
        return hint_rows([("a", 1, 10, 1, False)])

    hints._frame = frame  # type: ignore[method-assign]
    hints.start_next(lambda rows: rows)
    stop.wait(10)
    found = hints.start("the batch's own rows").result(timeout=10)
    assert hints.ahead_found() is False  # start() took the extraction ahead
    assert framed == ["rows of a, b"] and "next_unavailable" not in found
    assert (found["source"], found["next_files"], found["hinted"]) == (AHEAD, 2, 1)
    hints.close()


class NothingArrives:
    """A peekable source whose next batch has no file yet (``reason`` says why)."""

    def __init__(self, reason: str, frame: object = None):
        self.reason, self.frame = reason, frame

    def peek(self, skip: frozenset[str] = frozenset()) -> Peek:
        if self.frame is not None:
            return Peek(("f",), self.frame, planned=0)  # type: ignore[arg-type]
        return Peek(reason=self.reason, planned=0)

    def follow(self, checkpoint: object) -> None:
        pass


def test_extracting_ahead_without_input_or_with_a_failure_names_the_reason(manager, caplog):
    hints = batch_hints(manager)
    hints.POLL_S = 0.0
    stop = threading.Event()
    stop.set()  # one look only
    hints.next_input = NothingArrives("no new files yet")
    found = hints._extract_ahead(lambda rows: rows, 0, stop)
    assert (found["stage"], found["next_unavailable"]) == (0, "no new files yet") and "rows" not in found

    def broken(rows, stage):
        raise OSError("the file is gone")

    hints._frame = broken  # type: ignore[method-assign]
    hints.next_input = NothingArrives("", frame="rows of f")
    with caplog.at_level(logging.WARNING, logger="misa.runtime.batch_hints"):
        found = hints._extract_ahead(lambda rows: rows, 0, stop)
    assert found["next_unavailable"] == "failed" and not hints.ahead_found()
    assert [r.getMessage() for r in caplog.records] == ["the next batch's hints could not be extracted ahead"]
    hints.close()


def test_start_next_does_nothing_without_a_peekable_source_and_drop_ahead_forgets_the_extraction(manager):
    hints = batch_hints(manager)
    hints.start_next(lambda rows: rows)
    assert hints._ahead is None
    hints.next_input = NothingArrives("nothing yet")
    hints.start_next(lambda rows: rows)
    ahead = hints._ahead
    hints.drop_ahead()  # the extraction ahead stops at its next look
    assert hints._ahead is None and ahead.result(timeout=10)["next_unavailable"] == "nothing yet"
    hints.close()


def test_end_batch_moves_the_lookahead_to_the_next_stage_after_wasteful_batches(manager):
    hints = batch_hints(manager, stages=2, **{"prefetch.wastedRatioThreshold": "0.5"})
    wasteful = PrefetchStats(prefetched=200, wasted_prefetches=150, prefetch_hits=50)
    useful = PrefetchStats(prefetched=200, wasted_prefetches=10, prefetch_hits=190)
    assert [hints.end_batch(IN_BATCH, s)["next_stage"] for s in (wasteful, useful, wasteful, wasteful)] == [0, 0, 0, 1]
    assert hints.end_batch(IN_BATCH, useful) == {"next_stage": 1, "next_source": AHEAD}
    hints.close()


def test_hints_need_a_stage_and_an_operator_that_names_its_keys(manager):
    with pytest.raises(ValueError, match="at least one hint stage is needed"):
        BatchHints(MisaConfig(), Operator(), [], manager)  # type: ignore[arg-type]
    assert supports_hints(Operator())
    assert not supports_hints(SimpleNamespace(hint_spec=lambda: None, hint_keys=None))
    assert not supports_hints(object())
