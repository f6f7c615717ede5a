"""What the Linear Road, NEXMark and YSB generators share: bad-record injection and the part files.

:class:`BadRecordInjector` replaces a seeded-random fraction of the JSON lines by malformed ones, the kinds
in rotation: ``bad-json`` (the line cut off in the middle, so it does not parse), ``missing-key``
(the record without its key field) and ``wrong-type`` (a numeric field given as a string such as
``"x17"``). It draws from its own random stream, so the good lines are the same as with
``bad_fraction=0``.

:class:`PartWriter` writes the lines as gen cm does: files ``part-<8 digits>.json`` in event-time
order, file ``i`` holding the records of ``[i / F, (i + 1) / F)`` seconds after the start, each
written under a dot name (which Spark's file source ignores), given its modification time and
renamed into place once no later chunk can add to it. Every bad line is also appended to
``OUT/_bad_records.txt`` (Spark ignores names starting with ``_``). Generators work in chunks of at
most :data:`CHUNK_RECORDS` records, so memory stays bounded.
"""
from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from jobs.gen.cm import _finish, _staging  # the same file names and modification times as gen cm

KINDS = ("bad-json", "missing-key", "wrong-type")
BAD_RECORDS_FILE = "_bad_records.txt"
SIDE_DIR = "_side"
CHUNK_RECORDS = 1 << 17
BASE_TIME_MS = 1_700_000_000_000  # event time of the start for the generators with epoch-millisecond times
UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000}  # event-time units per second


@dataclass(frozen=True)
class Target:
    """The fields a bad record spoils, as dotted paths into nested objects.

    ``missing-key`` drops the first of ``key`` that the record has; ``wrong-type`` turns one of the
    ``numeric`` fields that the record has (chosen at random) into a string.
    """

    key: tuple[str, ...]
    numeric: tuple[str, ...]


def validate(rate: float, seconds: int, files_per_second: float, bad_fraction: float, **positive: float) -> None:
    """Raise ValueError naming every argument out of its range (``positive`` ones must be > 0)."""
    rules = [("rate", rate, rate >= 0, ">= 0"), ("seconds", seconds, seconds > 0, "> 0"),
             ("files_per_second", files_per_second, files_per_second > 0, "> 0"),
             ("bad_fraction", bad_fraction, 0 <= bad_fraction < 1, ">= 0 and < 1"),
             *((name, value, value > 0, "> 0") for name, value in positive.items())]
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


class BadRecordInjector:
    """Replaces a fraction of the lines by malformed records, the kinds in rotation."""

    def __init__(self, fraction: float, seed: int, target: Target):
        self.fraction = fraction
        self.target = target
        self.rng = np.random.default_rng([seed, 0xBAD])  # its own stream: good lines do not depend on it
        self.by_kind = Counter({kind: 0 for kind in KINDS})

    def inject(self, lines: list[str]) -> list[str]:
        """Replace the chosen lines in place and return the bad lines, in order."""
        if not self.fraction:
            return []
        bad = []
        for index in np.flatnonzero(self.rng.random(len(lines)) < self.fraction).tolist():
            kind = KINDS[sum(self.by_kind.values()) % len(KINDS)]
            lines[index] = self._spoil(kind, lines[index])
            self.by_kind[kind] += 1
            bad.append(lines[index])
        return bad

    def _spoil(self, kind: str, line: str) -> str:
        if kind == "bad-json":  # a proper prefix of a JSON object never parses
            return line[:int(self.rng.integers(len(line) // 4, 3 * len(line) // 4 + 1))]
        record = json.loads(line)
        if kind == "missing-key":
            parent, name = _present(record, self.target.key)[0]
            del parent[name]
        else:
            fields = _present(record, self.target.numeric)
            parent, name = fields[int(self.rng.integers(len(fields)))]
            parent[name] = f"x{parent[name]}"
        return json.dumps(record, separators=(",", ":"))


def _present(record: dict, paths: tuple[str, ...]) -> list[tuple[dict, str]]:
    """``(parent object, field name)`` of each dotted path that the record has."""
    found = []
    for path in paths:
        *parents, name = path.split(".")
        parent = record
        for step in parents:
            parent = parent.get(step) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and name in parent:
            found.append((parent, name))
    return found


class PartWriter:
    """Event-time ordered JSON-lines part files with bad records injected; ``close`` returns the stats."""

    def __init__(self, out_dir: str | Path, name: str, seconds: int, files_per_second: float, bad: BadRecordInjector,
                 unit: str = "s", start: int = 0, progress: bool = True):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / BAD_RECORDS_FILE).write_bytes(b"")
        self.name, self.bad, self.unit, self.start = name, bad, unit, start
        self.files = max(1, math.ceil(seconds * files_per_second - 1e-9))
        self.span = UNITS[unit] / files_per_second  # event time per file
        self.progress = progress and seconds >= 60
        self.lines, self.first, self.last, self.opened, self.done = 0, None, None, -1, 0

    def write(self, times: np.ndarray, lines: list[str]) -> None:
        """Add the next lines (``times``: their event times, nondecreasing and after every earlier line's)."""
        if not lines:
            return
        bad = self.bad.inject(lines)
        if bad:
            with open(self.out / BAD_RECORDS_FILE, "ab") as f:
                f.write("".join(line + "\n" for line in bad).encode())
        self.first = int(times[0]) if self.first is None else self.first
        self.last, self.lines = int(times[-1]), self.lines + len(lines)
        file_of = np.minimum(((times - self.start) // self.span).astype(np.int64), self.files - 1)
        indices = np.unique(file_of)
        lows, highs = np.searchsorted(file_of, indices, "left"), np.searchsorted(file_of, indices, "right")
        for index, low, high in zip(indices.tolist(), lows.tolist(), highs.tolist()):
            self._open_through(index)
            with open(_staging(self.out, index), "ab") as f:
                f.write("".join(line + "\n" for line in lines[low:high]).encode())
        self._finish_before(int(file_of[-1]))  # later lines go to this file or later ones

    def close(self) -> dict:
        """Finish the remaining files; return ``files``, ``records`` (good), ``bad``, ``bad_by_kind``
        and ``first_time_<unit>`` / ``last_time_<unit>`` (``None`` without records)."""
        self._finish_before(self.files)
        bad = sum(self.bad.by_kind.values())
        return {"files": self.files, "records": self.lines - bad, "bad": bad, "bad_by_kind": dict(self.bad.by_kind),
                f"first_time_{self.unit}": self.first, f"last_time_{self.unit}": self.last}

    def _open_through(self, index: int) -> None:
        """Start the staging files up to ``index`` afresh (dropping stale ones), empty unless written to later."""
        for new in range(self.opened + 1, index + 1):
            _staging(self.out, new).write_bytes(b"")
        self.opened = max(self.opened, index)

    def _finish_before(self, end: int) -> None:
        self._open_through(end - 1)
        for index in range(self.done, end):
            _finish(self.out, index)
            if self.progress and (index + 1) % max(1, self.files // 10) == 0:
                print(f"gen {self.name}: {index + 1}/{self.files} files", file=sys.stderr, flush=True)
        self.done = max(self.done, end)
