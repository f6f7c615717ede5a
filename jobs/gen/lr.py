"""Linear Road input: position reports of vehicles on ``xways`` expressways.

Each expressway direction is 100 segments of 5280 positions (``pos`` 0..527999, ``seg = pos //
5280``); direction 0 drives towards higher positions, 1 towards lower ones. A vehicle enters on
lane 0 at a random position, reports every 30 s (travel lanes 1-3), the distance since its last
report being ``round(spd * 30 * 1609 / 3600)``, and leaves on lane 4 after a random number of
reports, or earlier when its next position would be past the end of the expressway. The traffic
runs in ``round(30 * rate)`` slots, a thirtieth of them reporting in each second; when a vehicle
leaves, a new one (new ``vid``, ids in order of entry) takes its slot 30 s after its last report,
so about ``rate`` reports are made every second. Each trip is a new ``vid`` unless ``vehicles``
bounds the fleet: then a trip takes the id that has been off the expressway longest, so
``vehicles`` ids (at least the ``30 * rate`` on the road at once) come back trip after trip.
``time`` is the event time in seconds since the start. Output files and bad records as in
:mod:`jobs.gen.parts` and :mod:`jobs.gen.bad_records`.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import pandas as pd

from jobs.gen import parts
from jobs.gen.bad_records import BadRecordInjector, Target
from jobs.gen.parts import LateArrivals, PartWriter, json_lines, validate

REPORT_INTERVAL = 30  # seconds between a vehicle's reports
SEGMENT_LENGTH = 5280
SEGMENTS = 100
LENGTH = SEGMENTS * SEGMENT_LENGTH
ADVANCE_PER_SPEED = REPORT_INTERVAL * 1609 / 3600  # distance covered between reports per unit of spd
MIN_REPORTS, MAX_REPORTS = 2, 40  # reports a vehicle plans to make (uniform), unless the expressway ends first
ENTRY_LANE, EXIT_LANE = 0, 4
TARGET = Target(key=("vid",), numeric=("spd", "vid"))


def generate_lr(
    out: str | Path,
    rate: float,
    seconds: int,
    seed: int = 0,
    files_per_second: float = 1.0,
    xways: int = 1,
    bad_fraction: float = 0.0,
    vehicles: int = 0,
    *,
    progress: bool = True,
    late: LateArrivals | None = None,
) -> dict:
    """Write ``seconds`` of position reports at about ``rate`` reports/s into ``out``.

    Deterministic for given arguments. Returns the :class:`~jobs.gen.parts.PartWriter` stats
    (``files``, ``records``, ``bad``, ``bad_by_kind``, ``first_time_s``, ``last_time_s``) and
    ``vehicles`` (how many distinct vehicles reported). ``vehicles`` > 0 bounds the fleet (see the module).
    """
    validate(rate, seconds, files_per_second, bad_fraction, xways=xways)
    slots = round(rate * REPORT_INTERVAL)
    if vehicles < 0 or 0 < vehicles < slots:
        raise ValueError(
            f"vehicles must be 0 (a new vehicle per trip) or at least the {slots} on the expressways "
            f"at once (30 s x rate); got {vehicles}"
        )
    writer = PartWriter(
        out,
        "lr",
        seconds,
        files_per_second,
        BadRecordInjector(bad_fraction, seed, TARGET),
        "s",
        progress=progress,
        late=late,
    )
    traffic = Traffic(np.random.default_rng(seed), slots, xways, vehicles)
    for period_start in range(0, seconds, REPORT_INTERVAL):
        reporting = int(np.searchsorted(traffic.phase, seconds - period_start))  # slots due before the end
        for low in range(0, reporting, parts.CHUNK_RECORDS):
            high = min(reporting, low + parts.CHUNK_RECORDS)
            frame = traffic.report(low, high, period_start)
            writer.write(frame["time"].to_numpy(), json_lines(frame))
    return {**writer.close(), "vehicles": traffic.distinct_vehicles}


class Traffic:
    """The vehicles in the report slots; slot ``i`` reports at second ``phase[i]`` of every 30 s period."""

    def __init__(self, rng: np.random.Generator, slots: int, xways: int, fleet: int = 0):
        self.rng, self.xways, self.trips = rng, xways, 0
        self.fleet = fleet
        self.parked: deque[int] = deque(range(fleet))  # a bounded fleet's ids off the road, longest first
        self.phase = np.arange(slots, dtype=np.int64) * REPORT_INTERVAL // max(slots, 1)
        self.vid = np.zeros(slots, dtype=np.int64)
        self.xway, self.dir, self.pos, self.spd, self.cruise = (np.zeros(slots, dtype=np.int64) for _ in range(5))
        self.left = np.zeros(slots, dtype=np.int64)  # reports still to make; 0: the slot is free
        self.first = np.zeros(slots, dtype=bool)

    def report(self, low: int, high: int, period_start: int) -> pd.DataFrame:
        """The reports of slots ``low .. high - 1`` in the period starting at ``period_start`` (s), in time order."""
        s = slice(low, high)
        self._enter(low + np.flatnonzero(self.left[s] == 0))
        pos, spd, direction = self.pos[s], self.spd[s], self.dir[s]
        next_spd = self._speed(self.cruise[s])
        step = np.rint(next_spd * ADVANCE_PER_SPEED).astype(np.int64)
        next_pos = pos + np.where(direction == 0, step, -step)
        last = (self.left[s] == 1) | (next_pos < 0) | (next_pos >= LENGTH)
        lane = np.where(self.first[s], ENTRY_LANE, self.rng.integers(1, EXIT_LANE, high - low))
        frame = pd.DataFrame(
            {
                "type": np.zeros(high - low, dtype=np.int64),
                "time": period_start + self.phase[s],
                "vid": self.vid[s],
                "spd": spd,
                "xway": self.xway[s],
                "lane": np.where(last, EXIT_LANE, lane),
                "dir": direction,
                "seg": pos // SEGMENT_LENGTH,
                "pos": pos,
            }
        )
        self.pos[s], self.spd[s] = next_pos, next_spd
        if self.fleet:
            self.parked.extend(self.vid[s][last].tolist())
        self.left[s] = np.where(last, 0, self.left[s] - 1)
        self.first[s] = False
        return frame

    def _enter(self, slots: np.ndarray) -> None:
        """New vehicles, in slot (= entry time) order, take the free ``slots``."""
        n = len(slots)
        if self.fleet:
            self.vid[slots] = [self.parked.popleft() for _ in range(n)]
        else:
            self.vid[slots] = self.trips + np.arange(n)
        self.trips += n
        self.xway[slots] = self.rng.integers(0, self.xways, n)
        self.dir[slots] = self.rng.integers(0, 2, n)
        self.pos[slots] = self.rng.integers(0, LENGTH, n)
        self.cruise[slots] = np.clip(np.rint(self.rng.normal(60, 12, n)), 20, 95)
        self.spd[slots] = self._speed(self.cruise[slots])
        self.left[slots] = self.rng.integers(MIN_REPORTS, MAX_REPORTS + 1, n)
        self.first[slots] = True

    @property
    def distinct_vehicles(self) -> int:
        """Vehicles that have reported so far (a bounded fleet hands out its ids in order, then reuses them)."""
        return min(self.trips, self.fleet) if self.fleet else self.trips

    def _speed(self, cruise: np.ndarray) -> np.ndarray:
        """A report's speed: the vehicle's cruising speed with some noise, in 0..100."""
        return np.clip(np.rint(cruise + self.rng.normal(0, 5, len(cruise))), 0, 100).astype(np.int64)
