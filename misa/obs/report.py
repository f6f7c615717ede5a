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

from misa.obs.records import BATCH_PHASES, CACHE_COUNTERS, COMMIT_PHASES, PREFETCH_COUNTERS
from misa.obs.runs import WARMUP_BATCHES, run_starts, split_runs, steady
from misa.units import human_bytes

PERCENTILE_METHOD = "linear"
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
    p.add_argument(
        "--warmup",
        type=_batches,
        default=WARMUP_BATCHES,
        metavar="N",
        help="batches at the start of each run left out of the side-by-side table and the CDF "
        f"(default {WARMUP_BATCHES}: JVM and Python worker start, code generation, JIT)",
    )
    p.set_defaults(func=run)


def _batches(text: str) -> int:
    """A ``--warmup`` value: a number of batches, 0 or more."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number of batches (0 or more), got {text!r}")
    return n


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


def state_bytes(record: dict[str, Any]) -> int | float | None:
    """The state's size after a batch: the runtime's ``state_bytes`` (RocksDB's live SST files and memtables),
    else Spark's state store (``memoryUsedBytes`` plus its SST files), else None."""
    own = _num(record.get("state_bytes"))
    if own is not None:
        return own
    memory = _num(record.get("spark_state_memory_bytes"))
    return None if memory is None else memory + (_num(record.get("spark_state_sst_bytes")) or 0)


def _last(records: Sequence[dict[str, Any]], value: Any) -> Any:
    """The last non-None ``value(record)``."""
    return next((v for v in map(value, reversed(records)) if v is not None), None)


def compare(series: dict[str, Sequence[dict[str, Any]]], warmup: int = WARMUP_BATCHES) -> list[dict[str, Any]]:
    """One row per series: runs, batches measured (without the first ``warmup`` of each run) and in all,
    p50/p99 latency and busy throughput of the measured batches, and the state after the last batch."""
    rows = []
    for name, records in series.items():
        measured = steady(records, warmup)
        summary = summarize(measured)
        latency = summary["latency_s"] or {}
        rows.append(
            {
                "name": name,
                "runs": len(split_runs(records)),
                "batches": len(records),
                "measured": len(measured),
                "p50": latency.get("p50"),
                "p99": latency.get("p99"),
                "rows_per_s": summary["throughput"]["rows_per_s"],
                "state_bytes": _last(records, state_bytes),
                "state_keys": _last(records, lambda r: _num(r.get("state_keys"))),
                "state_rows": _last(records, lambda r: _num(r.get("spark_state_rows"))),
            }
        )
    return rows


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}"


def format_comparison(rows: Sequence[dict[str, Any]], warmup: int = WARMUP_BATCHES) -> str:
    """The rows of :func:`compare` side by side, each runtime mode against ``native`` when there is one."""
    lines = [
        f"side by side, warm-up left out: the first {warmup} batches of each run (JVM and Python worker start, "
        "code generation, JIT)"
    ]

    def keys(row: dict[str, Any]) -> str:
        if row["state_keys"] is not None:
            return f"~{row['state_keys']:,.0f}"
        return _count(row["state_rows"])

    lines += _table(
        ["mode", "runs", "batches", "p50 (s)", "p99 (s)", "rows/s", "state size", "state keys"],
        [
            [
                row["name"],
                str(row["runs"]),
                f"{row['measured']} of {row['batches']}",
                _s(row["p50"]),
                _s(row["p99"]),
                _count(row["rows_per_s"]),
                "n/a" if row["state_bytes"] is None else human_bytes(row["state_bytes"]),
                keys(row),
            ]
            for row in rows
        ],
    )
    native = next((row for row in rows if row["name"].split(":")[-1] == "native"), None)
    for row in rows:
        if native is not None and row is not native:
            lines.append(
                f"{row['name']} against {native['name']}: p50 {_ratio(row['p50'], native['p50'])} and "
                f"p99 {_ratio(row['p99'], native['p99'])} of its latency, "
                f"{_ratio(row['rows_per_s'], native['rows_per_s'])} times its rows/s"
            )
    lines += [
        "rows/s: input rows over the summed latency of the measured batches (busy throughput)",
        "state after the last batch: the runtime's RocksDB live SST files and memtables, keys by RocksDB's "
        "estimate (~);",
        "  native: Spark's state store memoryUsedBytes (memtables, table readers, block cache) plus its SST files, "
        "rows only when Spark counts them",
    ]
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


#: The runtime's own per-batch numbers the timeline draws apart from the latency (Spark's compute dominates it).
TIMELINE_SERIES = ("latency_s", "state_read_s", "merge_s", "commit_lag", "bytes_uploaded", "state_bytes")


def _commit_lag(record: dict[str, Any]) -> int | None:
    pending = _get(record, "commit_status", "pending")
    return len(pending) if isinstance(pending, list) else None


def timeline(series: dict[str, Sequence[dict[str, Any]]]) -> tuple[dict[str, dict[str, list]], str]:
    """What the timeline draws for each series, and the x axis's label.

    Per series: ``x`` (seconds since the series' first batch started when every record has ``started``,
    so that series run one after the other overlap; else the record's position in its series), the
    values of :data:`TIMELINE_SERIES` per record (None where a record has none: ``merge_s`` is
    ``state_apply_s``, ``commit_lag`` the versions not yet durable when the batch ended,
    ``bytes_uploaded`` the commit that finished in the batch),
    and ``restarts``, the x of each run but the first.
    """
    timed = all(_num(r.get("started")) is not None for records in series.values() for r in records)
    out: dict[str, dict[str, list]] = {}
    for name, records in series.items():
        x = [float(r["started"] - records[0]["started"]) if timed else float(i) for i, r in enumerate(records)]
        out[name] = {
            "x": x,
            "latency_s": [_num(r.get("latency_s")) for r in records],
            "state_read_s": [_num(_get(r, "phases", "state_read_s")) for r in records],
            "merge_s": [_num(_get(r, "phases", "state_apply_s")) for r in records],
            "commit_lag": [_commit_lag(r) for r in records],
            "bytes_uploaded": [_num(_get(r, "commit", "bytes_uploaded")) for r in records],
            "state_bytes": [state_bytes(r) for r in records],
            "restarts": [x[i] for i in run_starts(records)[1:]],
        }
    return out, "seconds since the series' first batch started" if timed else "batch (in file order)"


def _latency_scale(ax: Any, series: dict[str, Sequence[dict[str, Any]]], warmup: int) -> str:
    """End the latency axis a little above the measured batches' highest latency; the axis's title, naming
    the warm-up batches above it."""
    measured = [v for records in series.values() for v in _values(steady(records, warmup), "latency_s")]
    if not warmup or not measured:
        return "batch latency"
    top = max(measured) * 1.15
    ax.set_ylim(top=top)
    above = []
    for name, records in series.items():
        warm = [lat for run in split_runs(records) for lat in _values(run[:warmup], "latency_s") if lat > top]
        if warm:
            above.append(f"{name} to {max(warm):.1f} s")
    return f"batch latency; warm-up ({warmup} batches a run)" + (
        f" above the axis: {', '.join(above)}" if above else " left in"
    )


def _draw(ax: Any, x: list[float], values: list, scale: float = 1.0, **style: Any) -> bool:
    """Plot the values that exist (None: a gap); False when there is none."""
    if all(v is None for v in values):
        return False
    ax.plot(x, [np.nan if v is None else v * scale for v in values], **style)
    return True


def _timeline_figure(series: dict[str, Sequence[dict[str, Any]]], path: Path, warmup: int) -> bool:
    """Latency of every series, then the runtime's phases and commit lag, upload bytes and the state size,
    each on its own axis over the same time; restarts marked on every axis. The latency axis ends above the
    batches after the first ``warmup`` of each run; its title names the warm-up batches above it. False
    when there is nothing to draw."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data, xlabel = timeline(series)
    panels = [
        ("batch latency", "seconds", ["latency_s"]),
        ("the runtime's own phases: state read, merge (commit lag on the right)", "ms", ["state_read_s", "merge_s"]),
        ("bytes uploaded per commit", "KiB", ["bytes_uploaded"]),
        (
            "state size (runtime: live SST files + memtables; native: Spark's memoryUsedBytes + SST files)",
            "MiB",
            ["state_bytes"],
        ),
    ]
    panels = [p for p in panels if any(v is not None for d in data.values() for k in p[2] for v in d[k])]
    if not panels:
        return False
    fig = Figure(figsize=(10, 2.6 * len(panels) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    scales = {"seconds": 1.0, "ms": 1000.0, "KiB": 1 / 1024, "MiB": 1 / 1024**2}
    for ax, (title, unit, keys) in zip(axes, panels):
        lag_axis = None  # the commit lag, on the phases' axis
        for i, (name, d) in enumerate(data.items()):
            color, marker = f"C{i % 10}", "." if len(d["x"]) <= 200 else None
            for key, style in zip(keys, ("-", "--")):
                label = name if len(keys) == 1 else f"{name}: {key.removesuffix('_s').replace('_', ' ')}"
                _draw(ax, d["x"], d[key], scales[unit], color=color, linestyle=style, marker=marker, label=label)
            if "merge_s" in keys and any(v is not None for v in d["commit_lag"]):
                lag_axis = lag_axis or ax.twinx()
                _draw(lag_axis, d["x"], d["commit_lag"], color=color, linestyle=":", drawstyle="steps-post",
                      label=f"{name}: commit lag")  # fmt: skip
            for n, at in enumerate(d["restarts"]):
                ax.axvline(at, color=color, linestyle="-.", linewidth=1.2,
                           label=f"{name}: restart" if n == 0 and ax is axes[0] else None)  # fmt: skip
        if ax is axes[0]:
            title = _latency_scale(ax, series, warmup)
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if lag_axis is not None:
            lag_axis.set_ylabel("versions pending")
            lag_axis.set_ylim(bottom=0)
            lag_handles, lag_labels = lag_axis.get_legend_handles_labels()
            handles, labels = handles + lag_handles, labels + lag_labels
        if handles:
            ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.08, 1), fontsize="small")
    axes[-1].set_xlabel(xlabel)
    fig.savefig(path, dpi=100)
    return True


def plot(
    records: Sequence[dict[str, Any]] | dict[str, Sequence[dict[str, Any]]],
    out_dir: str | os.PathLike[str],
    warmup: int = 0,
) -> list[Path]:
    """Write ``latency_timeline.png`` and ``latency_cdf.png`` into ``out_dir``; return the files written.

    ``records`` is one file's records (a series per mode) or a mapping of series name to records. The
    timeline is :func:`timeline`'s numbers on one figure; the CDF marks p50 and p99 of the batches after
    the first ``warmup`` of each run. A plot with nothing to draw is not written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = split_series([("batches", records)]) if not isinstance(records, dict) else dict(records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if _timeline_figure(series, out / "latency_timeline.png", warmup):
        written.append(out / "latency_timeline.png")

    lines = {name: _values(steady(recs, warmup), "latency_s") for name, recs in series.items()}
    lines = {name: values for name, values in lines.items() if values}
    if lines:
        fig = Figure(figsize=(8, 5), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        for i, (name, values) in enumerate(lines.items()):
            latencies = np.sort(values)
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
        left_out = f"; first {warmup} batches of each run left out" if warmup else ""
        ax.set(
            xlabel="batch latency (s)",
            ylabel="fraction of batches",
            ylim=(0, 1.02),
            title=f"batch latency CDF (o p50, \u25c6 p99; numpy {PERCENTILE_METHOD}{left_out})",
        )
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        written.append(out / "latency_cdf.png")
        fig.savefig(written[-1], dpi=100)
    return written


def run(args: argparse.Namespace) -> int:
    """Print a summary per file (per mode when a file mixes modes), then the series side by side without
    their warm-up batches (:func:`format_comparison`); plot when ``--out`` is given.

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
    if sources:
        print(format_comparison(compare(split_series(sources), args.warmup), args.warmup), end="\n\n")
    if args.out and sources:
        for written in plot(split_series(sources), args.out, args.warmup):
            print(f"wrote {written}")
    return status
