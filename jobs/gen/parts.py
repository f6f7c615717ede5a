"""The part files every generator writes, and what the generators share to make them.

:class:`PartWriter` writes JSON lines as files ``part-<8 digits>.json`` in event-time order, file
``i`` holding the records of ``[i / F, (i + 1) / F)`` seconds after the start, each written under a
dot name (which Spark's file source ignores), given its modification time (``MTIME_BASE + i``) and
renamed into place once no later chunk can add to it. With :class:`LateArrivals`, a share of the records
is written into a later file than their event time's (out of order, possibly behind a query's watermark). With a
:class:`~jobs.gen.bad_records.BadRecordInjector`, every bad line is also appended to
``OUT/_bad_records.txt`` (Spark ignores names starting with ``_``). Generators work in chunks of at
most :data:`CHUNK_RECORDS` records, so memory stays bounded.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from jobs.gen.bad_records import BadRecordInjector

BAD_RECORDS_FILE = "_bad_records.txt"
SIDE_DIR = "_side"
CHUNK_RECORDS = 1 << 17
BASE_TIME_MS = 1_700_000_000_000  # event time of the start for the generators with epoch-millisecond times
UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000}  # event-time units per second
MTIME_BASE = 1_700_000_000  # modification time of the first file (s); file i gets MTIME_BASE + i


def validate(rate: float, seconds: int, files_per_second: float, bad_fraction: float, **positive: float) -> None:
    """Raise ValueError naming every argument out of its range (``positive`` ones must be > 0)."""
    rules = [
        ("rate", rate, rate >= 0, ">= 0"),
        ("seconds", seconds, seconds > 0, "> 0"),
        ("files_per_second", files_per_second, files_per_second > 0, "> 0"),
        ("bad_fraction", bad_fraction, 0 <= bad_fraction < 1, ">= 0 and < 1"),
        *((name, value, value > 0, "> 0") for name, value in positive.items()),
    ]
    wrong = [f"{name} must be {rule} (got {value})" for name, value, ok, rule in rules if not ok]
    if wrong:
        raise ValueError("; ".join(wrong))


def record_count(rate: float, seconds: int) -> int:
    """How many events with times ``n / rate`` fall in ``[0, seconds)``."""
    return max(0, math.ceil(rate * seconds - 1e-9))


def event_times_ms(numbers: np.ndarray, rate: float) -> np.ndarray:
    """Event time (epoch ms) of event number ``n`` at ``rate`` events/s, as NEXMark's ``timestampForEvent``."""
    return BASE_TIME_MS + (numbers * (1e6 / rate)).astype(np.int64) // 1000


def number_chunks(count: int) -> Iterator[np.ndarray]:
    """Event numbers ``0 .. count - 1`` in chunks of at most :data:`CHUNK_RECORDS`."""
    for begin in range(0, count, CHUNK_RECORDS):
        yield np.arange(begin, min(count, begin + CHUNK_RECORDS), dtype=np.int64)


def json_lines(frame: pd.DataFrame) -> list[str]:
    """Each row as one compact JSON object, columns in order."""
    if frame.empty:
        return []
    # pandas escapes "/" as "\/"; every "/" it writes is escaped, so this unescapes exactly those
    return frame.to_json(orient="records", lines=True).replace("\\/", "/").splitlines()


def write_side(out: Path, name: str, text: str) -> Path:
    """Write a side table to ``OUT/_side/NAME`` under a dot name first, then move it into place."""
    folder = out / SIDE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    staging = folder / f".{name}.tmp"
    staging.write_text(text)
    os.replace(staging, folder / name)
    return folder / name


def staging_path(out: Path, index: int) -> Path:
    """Where part ``index`` is written before it is moved into place."""
    return out / f".part-{index:08d}.json.tmp"  # Spark's file source ignores names starting with a dot


def finish_part(out: Path, index: int) -> None:
    """Give file ``index`` its modification time and move it into place."""
    staging = staging_path(out, index)
    mtime = MTIME_BASE + index
    os.utime(staging, (mtime, mtime))
    os.replace(staging, out / f"part-{index:08d}.json")


@dataclass(frozen=True)
class LateArrivals:
    """A share of records delivered late: a late record of event time t is written into the file of event time
    ``t + lateness_s`` (it arrives with the records of that time), so that a query's watermark may have passed it."""

    fraction: float
    lateness_s: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.fraction < 1 or self.lateness_s < 0:
            raise ValueError(
                f"late_fraction must be >= 0 and < 1 (got {self.fraction}) and lateness >= 0 (got {self.lateness_s})"
            )


class PartWriter:
    """Event-time ordered JSON-lines part files (with bad records injected, given an injector);
    ``close`` returns the stats."""

    def __init__(
        self,
        out_dir: str | Path,
        name: str,
        seconds: int,
        files_per_second: float,
        bad: BadRecordInjector | None = None,
        unit: str = "s",
        start: int = 0,
        progress: bool = True,
        late: LateArrivals | None = None,
    ):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        if bad is not None:
            (self.out / BAD_RECORDS_FILE).write_bytes(b"")
        self.name, self.bad, self.unit, self.start = name, bad, unit, start
        self.files = max(1, math.ceil(seconds * files_per_second - 1e-9))
        self.span = UNITS[unit] / files_per_second  # event time per file
        self.progress = progress and seconds >= 60
        self.lines, self.first, self.last, self.opened, self.done = 0, None, None, -1, 0
        self.late, self.late_lines = late, 0
        self._late_draws = np.random.default_rng(late.seed) if late is not None else None

    def write(self, times: np.ndarray, lines: list[str]) -> None:
        """Add the next lines (``times``: their event times, nondecreasing and after every earlier line's)."""
        if not lines:
            return
        bad = self.bad.inject(lines) if self.bad is not None else []
        if bad:
            with open(self.out / BAD_RECORDS_FILE, "ab") as f:
                f.write("".join(line + "\n" for line in bad).encode())
        self.first = int(times[0]) if self.first is None else self.first
        self.last, self.lines = int(times[-1]), self.lines + len(lines)
        file_of = self._file_of(self._arrival_times(times))
        order = np.argsort(file_of, kind="stable")
        in_order = file_of[order]
        indices = np.unique(in_order)
        lows, highs = np.searchsorted(in_order, indices, "left"), np.searchsorted(in_order, indices, "right")
        for index, low, high in zip(indices.tolist(), lows.tolist(), highs.tolist()):
            self._open_through(index)
            with open(staging_path(self.out, index), "ab") as f:
                f.write("".join(lines[i] + "\n" for i in order[low:high].tolist()).encode())
        self._finish_before(int(self._file_of(times[-1:])[0]))  # later lines go to this file or later ones

    def _file_of(self, times: np.ndarray) -> np.ndarray:
        return np.minimum(((times - self.start) // self.span).astype(np.int64), self.files - 1)

    def _arrival_times(self, times: np.ndarray) -> np.ndarray:
        """When each line arrives, in event time: its own, or ``lateness`` after it for the late ones."""
        if self.late is None or self._late_draws is None or not self.late.fraction:
            return times
        late = self._late_draws.random(len(times)) < self.late.fraction
        self.late_lines += int(late.sum())
        return times + late * int(self.late.lateness_s * UNITS[self.unit])

    def close(self) -> dict:
        """Finish the remaining files; return ``files``, ``records`` (good), ``first_time_<unit>`` /
        ``last_time_<unit>`` (``None`` without records) and, with an injector, ``bad`` and ``bad_by_kind``."""
        self._finish_before(self.files)
        stats = {
            "files": self.files,
            "records": self.lines,
            f"first_time_{self.unit}": self.first,
            f"last_time_{self.unit}": self.last,
        }
        if self.late is not None:
            stats["late"] = self.late_lines
        if self.bad is not None:
            bad = sum(self.bad.by_kind.values())
            stats.update(records=self.lines - bad, bad=bad, bad_by_kind=dict(self.bad.by_kind))
        return stats

    def _open_through(self, index: int) -> None:
        """Start the staging files up to ``index`` afresh (dropping stale ones), empty unless written to later."""
        for new in range(self.opened + 1, index + 1):
            staging_path(self.out, new).write_bytes(b"")
        self.opened = max(self.opened, index)

    def _finish_before(self, end: int) -> None:
        self._open_through(end - 1)
        for index in range(self.done, end):
            finish_part(self.out, index)
            if self.progress and (index + 1) % max(1, self.files // 10) == 0:
                print(f"gen {self.name}: {index + 1}/{self.files} files", file=sys.stderr, flush=True)
        self.done = max(self.done, end)
