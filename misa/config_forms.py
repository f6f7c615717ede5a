"""The forms a ``spark.misa.*`` setting's text takes: how each is parsed, the range a number must lie in, and
how a value is written back as text (in errors, the defaults file and the generated docs).

A :class:`Kind` is one setting's form; :func:`integer`, :func:`size`, :func:`duration` and :func:`choice` make
the numeric and enumerated ones, :data:`BOOL`, :data:`TEXT`, :data:`FRACTION`, :data:`PREFETCH_MODE` and
:data:`PROCESSES` are the others. :func:`parse_bytes` and :func:`parse_seconds` also read the jobs' and
operators' sizes and durations.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from typing import Any, Callable

MAX_WAIT_S = 1000 * 3600.0  # the longest duration: below every platform's threading.TIMEOUT_MAX (Windows: 1193 h)


@dataclass(frozen=True)
class Bounds:
    """The range a numeric setting must lie in: ``low`` to ``high`` (None: no upper limit), each end
    included unless ``low_open`` / ``high_open``."""

    low: float
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below  # NaN is neither

    def describe(self, show: Callable[[Any], str]) -> str:
        """The range in words, its ends written by ``show``: ``>= 1``, ``from 64k to 64g``, ``> 0s and <= 1000h``."""
        low = f"{'>' if self.low_open else '>='} {show(self.low)}"
        if self.high is None:
            return low
        if not (self.low_open or self.high_open):
            return f"from {show(self.low)} to {show(self.high)}"
        return f"{low} and {'<' if self.high_open else '<='} {show(self.high)}"


@dataclass(frozen=True)
class Kind:
    """How a setting's text is parsed, the range a numeric value must lie in, and the form shown when it is wrong."""

    name: str  # the type in the docs: "integer", "size", "boolean"
    noun: str  # "an integer", "a size", "true or false"
    parse: Callable[[str], Any]  # raises ValueError for text that is not of the form
    bounds: Bounds | None = None  # every numeric kind has one
    show: Callable[[Any], str] = str  # a value written as a setting's text
    examples: str = ""  # "such as 64m, 512k or 1g"

    @property
    def form(self) -> str:
        """What a value must look like, its range included: ``an integer from 1 to 254``."""
        return self.allowed if self.bounds is None else f"{self.noun} {self.allowed}"

    @property
    def allowed(self) -> str:
        """The values it takes, without the type's noun when a range says it: ``from 1 to 254``, ``one of a, b``."""
        text = self.noun if self.bounds is None else self.bounds.describe(self.show)
        return f"{text}, {self.examples}" if self.examples else text

    def accepts(self, value: Any) -> bool:
        """True when the parsed ``value`` lies in the range (always for a kind without one)."""
        return self.bounds is None or value in self.bounds


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError
    return lowered == "true"


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
_TIME_UNITS = {
    "": 1.0,
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}


def parse_bytes(text: str) -> int:
    """``64m``, ``4k``, ``1g`` or a plain number of bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def parse_seconds(text: str) -> float:
    """``200ms``, ``3s``, ``2min``, ``1h``, or Spark's ``30 seconds``; a bare number means seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _TIME_UNITS:
        raise ValueError(f"{text!r} is not a duration such as 200ms, 10s, 2min or 30 seconds")
    return float(match.group(1)) * _TIME_UNITS[match.group(2).lower()]


def _size_text(n: int) -> str:
    """``n`` bytes as a setting's text: ``64m``, ``4g``, else the plain number."""
    for unit in ("g", "m", "k"):
        if n and n % _SIZE_UNITS[unit] == 0:
            return f"{n // _SIZE_UNITS[unit]}{unit}"
    return str(n)


def duration_text(seconds: float) -> str:
    """``seconds`` as a setting's text: ``1000h``, ``5min``, ``10s``, ``0s``, else in ms (``0.001ms``)."""
    if seconds == 0:
        return "0s"
    for unit in ("h", "min", "s"):
        if seconds >= _TIME_UNITS[unit] and (seconds / _TIME_UNITS[unit]).is_integer():
            return f"{seconds / _TIME_UNITS[unit]:.0f}{unit}"
    return f"{seconds * 1000:g}ms"


def choice(*options: str, to: Callable[[str], Any] = str) -> Kind:
    """One of ``options``, as ``to`` makes it of the text."""

    def parse(text: str) -> Any:
        if text.strip() not in options:
            raise ValueError
        return to(text.strip())

    return Kind("choice", "one of " + ", ".join(options), parse)


def integer(low: int, high: int | None = None) -> Kind:
    """An integer from ``low`` (to ``high``)."""
    return Kind("integer", "an integer", int, Bounds(low, high))


def size(low: int, high: int | None = None, *, high_open: bool = False, examples: str = "64m, 512k or 1g") -> Kind:
    """A number of bytes from ``low`` (to ``high``)."""
    return Kind(
        "size", "a size", parse_bytes, Bounds(low, high, high_open=high_open), _size_text, f"such as {examples}"
    )


def duration(low: float, *, low_open: bool = False, examples: str = "200ms, 10s or 2min") -> Kind:
    """A number of seconds from ``low`` (excluded when ``low_open``) to :data:`MAX_WAIT_S`."""
    return Kind(
        "duration",
        "a duration",
        parse_seconds,
        Bounds(low, MAX_WAIT_S, low_open=low_open),
        duration_text,
        f"such as {examples}",
    )


BOOL = Kind("boolean", "true or false", _bool)
PREFETCH_MODES = ("true", "false", "auto")


def _prefetch_mode(text: str) -> str:
    lowered = text.strip().lower()
    if lowered not in PREFETCH_MODES:
        raise ValueError
    return lowered


PREFETCH_MODE = Kind("choice", "true, false or auto", _prefetch_mode)
FRACTION = Kind("number", "a number", float, Bounds(0.0, 1.0), lambda value: f"{value:g}")
TEXT = Kind("text", "any text", str.strip)


def _processes(text: str) -> int | None:
    """None for ``auto``, else a count from 1."""
    lowered = text.strip().lower()
    if lowered == "auto":
        return None
    if int(lowered) < 1:
        raise ValueError
    return int(lowered)


PROCESSES = Kind(
    "integer or auto", "auto or an integer >= 1", _processes, show=lambda n: "auto" if n is None else str(n)
)
