"""Malformed input records, injected into the generators' JSON lines to exercise the jobs' quarantine.

:class:`BadRecordInjector` replaces a seeded-random fraction of the lines by malformed ones, the
kinds in rotation: ``bad-json`` (the line cut off in the middle, so it does not parse),
``missing-key`` (the record without its key field) and ``wrong-type`` (a numeric field given as a
string such as ``"x17"``). It draws from its own random stream, so the good lines are the same as
with ``bad_fraction=0``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np

KINDS = ("bad-json", "missing-key", "wrong-type")


@dataclass(frozen=True)
class Target:
    """The fields a bad record spoils, as dotted paths into nested objects.

    ``missing-key`` drops the first of ``key`` that the record has; ``wrong-type`` turns one of the
    ``numeric`` fields that the record has (chosen at random) into a string.
    """

    key: tuple[str, ...]
    numeric: tuple[str, ...]


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
            return line[: int(self.rng.integers(len(line) // 4, 3 * len(line) // 4 + 1))]
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
