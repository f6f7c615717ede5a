"""``misa report``: summarise and plot the per-batch metrics a streaming job appends as JSON lines.

Every key of a record may be missing or null; malformed lines are counted, reported on stderr and
skipped. Percentiles are NumPy's, method ``linear``. Plots use matplotlib's Agg canvas, imported
only when plots are written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from misa.obs.records import BATCH_PHASES, COMMIT_PHASES
from misa.units import human_bytes

PERCENTILE_METHOD = "linear"
CACHE_COUNTERS = (
    "hits",
    "misses",
    "evictions",
    "dirty_evictions",
    "prefetched_entries",
    "prefetched_entries_read",
    "prefetched_entries_unread",
)
PREFETCH_COUNTERS = ("hints", "prefetched", "prefetch_hits", "wasted_prefetches", "late_hints", "fallback_fetches")
MAX_REPORTED_LINES = 5


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``misa report METRICS... [--out DIR]``."""
    p = subparsers.add_parser("report", help="summarise (and plot) the per-batch metrics of a streaming job")
    p.add_argument(
        "metrics", nargs="+", type=Path, metavar="METRICS", help="metrics file(s), one JSON record per batch"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="write latency_timeline.png and latency_cdf.png here (no plots without it)",
    )
    p.set_defaults(func=run)


def _num(value: Any) -> int | float | None:
    """``value`` if it is a finite number (not a bool), else None."""
    kind = type(value)
    return value if kind is int or (kind is float and math.isfinite(value)) else None


def _get(record: dict[str, Any], *keys: str) -> Any:
    """``record[k1][k2]...``, or None as soon as a level is missing or not an object."""
    value: Any = record
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _mode(record: dict[str, Any]) -> str | None:
    mode = record.get("mode")
    return str(mode) if mode is not None else None


def _values(records: Iterable[dict[str, Any]], *keys: str) -> list[int | float]:
    return [v for v in (_num(_get(r, *keys)) for r in records) if v is not None]


def _total(values: list[int | float]) -> int | float | None:
    return sum(values) if values else None


def _ordered_keys(records: Iterable[dict[str, Any]], section: str, known: Sequence[str], suffix: str = "") -> list[str]:
    """Keys with a numeric value in ``record[section]`` of any record: the known ones first, in their order."""
    seen: dict[str, None] = {}
    for record in records:
        part = record.get(section)
        if isinstance(part, dict):
            for key, value in part.items():
                if key not in seen and key.endswith(suffix) and _num(value) is not None:
                    seen[key] = None
    return [k for k in known if k in seen] + [k for k in seen if k not in known]


def load_metrics(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """Records (JSON objects) of a metrics file and the number of malformed lines skipped.

    Blank lines are ignored; the first few malformed lines and the total are reported on stderr.
    """
    records: list[dict[str, Any]] = []
    malformed = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                reason = None if isinstance(record, dict) else f"a JSON {type(record).__name__}, not an object"
            except ValueError as exc:
                reason = str(exc)
            if reason is None:
                records.append(record)
                continue
            malformed += 1
            if malformed <= MAX_REPORTED_LINES:
                print(f"misa report: {path}:{lineno}: skipped malformed line: {reason}", file=sys.stderr)
    if malformed:
        print(f"misa report: {path}: {malformed} malformed line(s) skipped", file=sys.stderr)
    return records, malformed


def _percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    return [float(p) for p in np.percentile(np.asarray(values, dtype=float), qs, method=PERCENTILE_METHOD)]


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Batch count, modes, latency percentiles, throughput, phase and commit times, bytes and counters.

    Each statistic uses the records that carry its value; a statistic without any value is None (or
    absent from its table). Busy throughput is input rows over latency, both from the same records;
    wall throughput is input rows over first ``started`` to last ``started + latency_s``.
    """
    latencies = _values(records, "latency_s")
    latency = None
    if latencies:
        p50, p95, p99 = _percentiles(latencies, (50, 95, 99))
        latency = {
            "count": len(latencies),
            "p50": p50,
            "p95": p95,
            "p99": p99,
            "max": float(max(latencies)),
            "mean": float(np.mean(latencies)),
        }

    busy = [
        (rows, lat)
        for rows, lat in ((_num(r.get("input_rows")), _num(r.get("latency_s"))) for r in records)
        if rows is not None and lat is not None
    ]
    busy_rows, busy_s = sum(rows for rows, _ in busy), float(sum(lat for _, lat in busy))
    timed = [r for r in records if _num(r.get("started")) is not None]
    wall_s = None
    if timed:
        wall_s = float(
            max(r["started"] + (_num(r.get("latency_s")) or 0) for r in timed) - min(r["started"] for r in timed)
        )
    wall_rows = _total(_values(timed, "input_rows"))
    throughput = {
        "input_rows": _total(_values(records, "input_rows")),
        "busy_s": busy_s if busy else None,
        "rows_per_s": busy_rows / busy_s if busy_s > 0 else None,
        "wall_s": wall_s,
        "rows_per_wall_s": wall_rows / wall_s if wall_rows is not None and wall_s else None,
    }

    phases = {}
    for name in _ordered_keys(records, "phases", BATCH_PHASES):
        values = _values(records, "phases", name)
        phases[name] = {"count": len(values), "mean": float(np.mean(values)), "p99": _percentiles(values, (99,))[0]}
    commit = {}
    for name in _ordered_keys(records, "commit", COMMIT_PHASES, suffix="_s"):
        values = _values(records, "commit", name)
        commit[name] = {"count": len(values), "mean": float(np.mean(values))}

    state_keys = _values(records, "state_keys")
    return {
        "batches": len(records),
        "modes": dict(Counter(m for m in map(_mode, records) if m is not None)),
        "percentile_method": PERCENTILE_METHOD,
        "latency_s": latency,
        "throughput": throughput,
        "phases_s": phases,
        "commit_s": commit,
        "bytes_uploaded": _total(_values(records, "commit", "bytes_uploaded")),
        "bytes_reused": _total(_values(records, "commit", "bytes_reused")),
        "late_rows": _total(_values(records, "late_rows")),
        "cache": {k: sum(_values(records, "cache", k)) for k in _ordered_keys(records, "cache", CACHE_COUNTERS)},
        "prefetch": _prefetch_summary(records),
        "state_keys": state_keys[-1] if state_keys else None,
    }


def _prefetch_summary(records: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """The prefetch manager's counters summed over the batches, and the slack (hint to read, s): the
    mean over all prefetch hits and the smallest; empty when no batch prefetched."""
    counters = [k for k in PREFETCH_COUNTERS if _values(records, "prefetch", k)]
    if not counters:
        return {}
    out: dict[str, float | None] = {k: sum(_values(records, "prefetch", k)) for k in counters}
    hits = [(r["prefetch"].get("prefetch_hits") or 0, r["prefetch"].get("slack_s_mean")) for r in records
            if isinstance(r.get("prefetch"), dict)]  # fmt: skip
    weighted = [(n, mean) for n, mean in hits if n and _num(mean) is not None]
    total = sum(n for n, _ in weighted)
    out["slack_s_mean"] = sum(n * mean for n, mean in weighted) / total if total else None
    minima = _values(records, "prefetch", "slack_s_min")
    out["slack_s_min"] = min(minima) if minima else None
    return out


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Lines of a table: first column left-aligned, the others right-aligned, two spaces apart."""
    rows = [list(header)] + [list(r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip() for r in rows]


def _s(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:.3f}"


def _count(n: float | None) -> str:
    return "n/a" if n is None else f"{n:,.0f}"


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as aligned text tables (durations in seconds)."""
    modes = ", ".join(f"{m} ({n})" for m, n in summary["modes"].items()) or "n/a"
    lines = [f"batches: {summary['batches']}    mode: {modes}"]
    latency = summary["latency_s"]
    if latency:
        lines += _table(
            ["batch latency (s)", "p50", "p95", "p99", "max", "mean", "batches"],
            [["", *(_s(latency[k]) for k in ("p50", "p95", "p99", "max", "mean")), str(latency["count"])]],
        )
        lines.append(f"percentiles: numpy, method {summary['percentile_method']!r}")
    else:
        lines.append("batch latency: n/a (no latency_s)")
    t = summary["throughput"]
    lines.append(
        f"throughput: {_count(t['rows_per_s'])} rows/s busy ({_count(t['input_rows'])} input rows, "
        f"{_s(t['busy_s'])} s in batches); {_count(t['rows_per_wall_s'])} rows/s over "
        f"{_s(t['wall_s'])} s wall time"
    )
    if summary["phases_s"]:
        lines += _table(
            ["batch phase (s)", "mean", "p99", "batches"],
            [[k, _s(v["mean"]), _s(v["p99"]), str(v["count"])] for k, v in summary["phases_s"].items()],
        )
    if summary["commit_s"]:
        lines += _table(
            ["commit phase (s)", "mean", "batches"],
            [[k, _s(v["mean"]), str(v["count"])] for k, v in summary["commit_s"].items()],
        )
    else:
        lines.append("commit: n/a")
    uploaded, reused = summary["bytes_uploaded"], summary["bytes_reused"]
    lines.append(
        f"bytes uploaded: {'n/a' if uploaded is None else human_bytes(uploaded)}, "
        f"reused: {'n/a' if reused is None else human_bytes(reused)}"
    )
    cache = dict(summary["cache"])
    if "hits" in cache and "misses" in cache and cache["hits"] + cache["misses"]:
        cache["hit rate"] = f"{100 * cache['hits'] / (cache['hits'] + cache['misses']):.1f}%"
    if cache:
        lines += _table(["cache", *cache], [["", *(v if isinstance(v, str) else _count(v) for v in cache.values())]])
    prefetch = summary.get("prefetch") or {}
    if prefetch:
        cells = [_s(v) if k.startswith("slack") else _count(v) for k, v in prefetch.items()]
        lines += _table(["prefetch", *prefetch], [["", *cells]])
    lines.append(f"late rows: {_count(summary['late_rows'])}    state keys (last): {_count(summary['state_keys'])}")
    return "\n".join(lines)


def split_series(sources: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> dict[str, list[dict[str, Any]]]:
    """One series per (source, mode), named by the mode; by the source name when the mode is missing;
    ``source:mode`` when several sources have that mode."""
    groups: list[tuple[str, str | None, list[dict[str, Any]]]] = []
    for source, records in sources:
        by_mode: dict[str | None, list[dict[str, Any]]] = {}
        for record in records:
            by_mode.setdefault(_mode(record), []).append(record)
        groups += [(source, mode, recs) for mode, recs in by_mode.items()]
    shared = Counter(mode for _, mode, _ in groups)
    series: dict[str, list[dict[str, Any]]] = {}
    for source, mode, records in groups:
        name = source if mode is None else mode if shared[mode] == 1 else f"{source}:{mode}"
        unique, n = name, 1
        while unique in series:
            n += 1
            unique = f"{name} ({n})"
        series[unique] = records
    return series


def _batch_axis(records: Sequence[dict[str, Any]]) -> list[float]:
    """Batch id of each record, or its position when the id is missing."""
    return [float(b) if (b := _num(r.get("batch_id"))) is not None else float(i) for i, r in enumerate(records)]


def plot(
    records: Sequence[dict[str, Any]] | dict[str, Sequence[dict[str, Any]]], out_dir: str | os.PathLike[str]
) -> list[Path]:
    """Write ``latency_timeline.png`` and ``latency_cdf.png`` into ``out_dir``; return the files written.

    ``records`` is one file's records (a series per mode) or a mapping of series name to records. The
    timeline has the latency of every series, then one panel per series with its phases stacked; the
    CDF marks p50 and p99. A plot with nothing to draw is not written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = split_series([("batches", records)]) if not isinstance(records, dict) else dict(records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    lines = {}
    for name, recs in series.items():
        points = sorted(
            (x, lat) for x, r in zip(_batch_axis(recs), recs) if (lat := _num(r.get("latency_s"))) is not None
        )
        if points:
            lines[name] = points
    stacked = {name: recs for name, recs in series.items() if _ordered_keys(recs, "phases", BATCH_PHASES)}
    phase_names = _ordered_keys([r for recs in stacked.values() for r in recs], "phases", BATCH_PHASES)

    if lines or stacked:
        rows = 1 + len(stacked)
        fig = Figure(figsize=(10, 3.2 * rows), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
        for name, points in lines.items():
            xs, ys = zip(*points)
            axes[0].plot(xs, ys, marker="." if len(xs) <= 200 else None, linewidth=1, label=name)
        axes[0].set_title("batch latency")
        for ax, (name, recs) in zip(axes[1:], stacked.items()):
            table = sorted(
                ((x, [_num(_get(r, "phases", p)) for p in phase_names]) for x, r in zip(_batch_axis(recs), recs)),
                key=lambda row: row[0],
            )
            table = [(x, v) for x, v in table if any(n is not None for n in v)]
            used = [i for i in range(len(phase_names)) if any(v[i] is not None for _, v in table)]
            ax.stackplot(
                [x for x, _ in table],
                [[v[i] or 0 for _, v in table] for i in used],
                labels=[phase_names[i] for i in used],
                colors=[f"C{i % 10}" for i in used],
                alpha=0.8,
            )
            if name in lines:
                ax.plot(*zip(*lines[name]), color="black", linewidth=1, label="batch latency")
            ax.set_title(f"{name}: batch phases (stacked)")
        for ax in axes:
            ax.set_ylabel("seconds")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
        axes[-1].set_xlabel("batch id")
        written.append(out / "latency_timeline.png")
        fig.savefig(written[-1], dpi=100)

    if lines:
        fig = Figure(figsize=(8, 5), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        for i, (name, points) in enumerate(lines.items()):
            latencies = np.sort([lat for _, lat in points])
            p50, p99 = _percentiles(latencies, (50, 99))
            color = f"C{i % 10}"
            ax.step(
                latencies,
                np.arange(1, len(latencies) + 1) / len(latencies),
                where="post",
                color=color,
                label=f"{name}: p50 {p50:.3f} s, p99 {p99:.3f} s (n={len(latencies)})",
            )
            ax.plot([p50], [0.5], "o", color=color)
            ax.plot([p99], [0.99], "D", color=color)
            for q in (p50, p99):
                ax.axvline(q, color=color, linestyle=":", linewidth=1)
        for level in (0.5, 0.99):
            ax.axhline(level, color="gray", linewidth=0.5)
        ax.set(
            xlabel="batch latency (s)",
            ylabel="fraction of batches",
            ylim=(0, 1.02),
            title=f"batch latency CDF (o p50, \u25c6 p99; numpy {PERCENTILE_METHOD})",
        )
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        written.append(out / "latency_cdf.png")
        fig.savefig(written[-1], dpi=100)
    return written


def run(args: argparse.Namespace) -> int:
    """Print a summary per file (per mode when a file mixes modes), plot when ``--out`` is given.

    Returns 1 when a file cannot be read or has no valid record, else 0.
    """
    status = 0
    sources: list[tuple[str, list[dict[str, Any]]]] = []
    for path in args.metrics:
        try:
            records, _ = load_metrics(path)
        except OSError as exc:
            print(f"misa report: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
            status = 1
            continue
        if not records:
            print(f"misa report: {path}: no valid record", file=sys.stderr)
            status = 1
            continue
        sources.append((path.stem, records))
        modes = split_series([(path.stem, records)])
        for name, recs in modes.items() if len(modes) > 1 else [(None, records)]:
            print(f"== {path}" + (f" [{name}]" if name else "") + " ==")
            print(format_summary(summarize(recs)), end="\n\n")
    if args.out and sources:
        for written in plot(split_series(sources), args.out):
            print(f"wrote {written}")
    return status
