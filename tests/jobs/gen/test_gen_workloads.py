"""The Linear Road, NEXMark and YSB generators (``jobs.gen.lr``, ``jobs.gen.nexmark``, ``jobs.gen.ysb``), their
bad records (``jobs.gen.bad_records``) and ``misa gen lr|nexmark|ysb``; no Spark session needed."""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from pyspark.sql.types import DataType, IntegerType, LongType, StringType, StructType

import jobs.gen.parts as part_files
from jobs.gen.lr import generate_lr
from jobs.gen.nexmark import generate_nexmark
from jobs.gen.parts import BASE_TIME_MS
from jobs.gen.ysb import generate_ysb
from jobs.schemas import LR_REPORTS, NEXMARK_EVENTS, YSB_EVENTS
from misa.cli import main as misa

RATE, SECONDS, FPS, SEED, BAD_FRACTION = 200, 60, 2, 5, 0.1
KINDS = {"bad-json", "missing-key", "wrong-type"}
RANGES = {LongType: (-(1 << 63), (1 << 63) - 1), IntegerType: (-(1 << 31), (1 << 31) - 1)}


def _nexmark_event(record: dict) -> dict:
    return record[("person", "auction", "bid")[record["event_type"]]]


@dataclass(frozen=True)
class GeneratorCase:
    generate: Callable[..., dict]
    schema: StructType
    options: dict  # the workload's own arguments
    time_ms: Callable[[dict], int]  # event time in ms since the start
    key: set[str]  # what a missing-key record may lack (dotted paths) ...
    numeric: set[str]  # ... and which fields a wrong-type record may spoil


WORKLOADS = {
    "lr": GeneratorCase(generate_lr, LR_REPORTS, {"xways": 3}, lambda r: r["time"] * 1000, {"vid"}, {"spd", "vid"}),
    "nexmark": GeneratorCase(
        generate_nexmark,
        NEXMARK_EVENTS,
        {"side_rows": 50},
        lambda r: _nexmark_event(r)["date_time"] - BASE_TIME_MS,
        {"person.id", "auction.id", "bid.auction"},
        {"person.id", "auction.id", "bid.price"},
    ),
    "ysb": GeneratorCase(
        generate_ysb,
        YSB_EVENTS,
        {"campaigns": 7, "ads_per_campaign": 4},
        lambda r: r["event_time"] - BASE_TIME_MS,
        {"ad_id"},
        {"event_time"},
    ),
}


@dataclass(frozen=True)
class Run:
    folder: Path
    stats: dict
    lines: list[str]  # every line of the part files, in file order

    @property
    def bad_lines(self) -> list[str]:
        return (self.folder / "_bad_records.txt").read_text().splitlines()

    def records(self) -> list[dict]:
        """The good records, in order."""
        bad = set(self.bad_lines)
        return [json.loads(line) for line in self.lines if line not in bad]


def parts(folder: Path) -> list[Path]:
    return sorted(folder.glob("part-*.json"))


def read_lines(folder: Path) -> list[str]:
    return [line for path in parts(folder) for line in path.read_text().splitlines()]


def conforms(value: object, data_type: DataType) -> bool:
    """Whether a parsed JSON value has exactly the Spark type's shape: struct fields in order, no nulls but
    whole nested structs, ints within the type's range (a bool is no int)."""
    if isinstance(data_type, StructType):
        return (
            type(value) is dict
            and list(value) == data_type.names
            and all(
                conforms(value[f.name], f.dataType) or (value[f.name] is None and isinstance(f.dataType, StructType))
                for f in data_type.fields
            )
        )
    if isinstance(data_type, StringType):
        return type(value) is str
    low, high = RANGES[type(data_type)]
    return type(value) is int and low <= value <= high


def flatten(record: dict, prefix: str = "") -> dict:
    flat = {}
    for name, value in record.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{name}."))
        else:
            flat[prefix + name] = value
    return flat


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Callable[[str, float], Run]:
    """``(workload, bad_fraction)`` -> its run: RATE records/s for SECONDS s, FPS files per second, SEED."""
    runs: dict[tuple[str, float], Run] = {}

    def run(name: str, bad_fraction: float = 0.0) -> Run:
        if (name, bad_fraction) not in runs:
            folder = tmp_path_factory.mktemp(f"{name}-{bad_fraction}")
            workload = WORKLOADS[name]
            stats = workload.generate(
                folder,
                RATE,
                SECONDS,
                seed=SEED,
                files_per_second=FPS,
                bad_fraction=bad_fraction,
                progress=False,
                **workload.options,
            )
            runs[name, bad_fraction] = Run(folder, stats, read_lines(folder))
        return runs[name, bad_fraction]

    return run


@pytest.mark.parametrize("name", WORKLOADS)
def test_records_per_second_are_around_the_rate(generated, name):
    run = generated(name)
    records = run.records()
    assert len(records) == run.stats["records"] == len(run.lines) and run.stats["bad"] == 0
    assert abs(len(records) - RATE * SECONDS) <= RATE * SECONDS * 0.02
    per_second = np.bincount([WORKLOADS[name].time_ms(r) // 1000 for r in records], minlength=SECONDS)
    assert len(per_second) == SECONDS and per_second.min() >= 0.95 * RATE and per_second.max() <= 1.05 * RATE


@pytest.mark.parametrize("name", WORKLOADS)
def test_event_time_order_within_and_across_files(generated, name):
    run = generated(name)
    time_ms = WORKLOADS[name].time_ms
    times = [time_ms(r) for r in run.records()]
    assert times == sorted(times) and times[0] == 0 and times[-1] < SECONDS * 1000
    unit, start = ("s", 0) if name == "lr" else ("ms", BASE_TIME_MS)
    scale = 1000 if unit == "s" else 1
    assert (run.stats[f"first_time_{unit}"] - start) * scale == times[0]
    assert (run.stats[f"last_time_{unit}"] - start) * scale == times[-1]
    span = 1000 // FPS
    for index, path in enumerate(parts(run.folder)):  # file i covers [i / F, (i + 1) / F) s after the start
        file_times = [time_ms(json.loads(line)) for line in path.read_text().splitlines()]
        assert all(index * span <= t < (index + 1) * span for t in file_times)


@pytest.mark.parametrize("name", WORKLOADS)
def test_file_names_modification_times_and_no_staging_files(generated, name):
    run = generated(name, BAD_FRACTION)
    folder, stats = run.folder, run.stats
    files = parts(folder)
    assert stats["files"] == len(files) == SECONDS * FPS
    assert [p.name for p in files] == [f"part-{i:08d}.json" for i in range(len(files))]
    mtimes = [p.stat().st_mtime_ns for p in files]
    assert all(a < b for a, b in zip(mtimes, mtimes[1:]))
    side = {"lr": set(), "nexmark": {"_side"}, "ysb": {"_side"}}[name]
    assert {p.name for p in folder.iterdir() if not p.name.startswith("part-")} == {"_bad_records.txt", *side}
    assert not list(folder.rglob(".*"))


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_good_line_has_the_spark_schema(generated, name):
    schema = WORKLOADS[name].schema
    for run in (generated(name), generated(name, BAD_FRACTION)):
        records = run.records()
        assert len(records) == run.stats["records"] > 0
        assert all(conforms(record, schema) for record in records)


@pytest.mark.parametrize("name", WORKLOADS)
def test_bad_fraction_replaces_that_share_with_each_kind(generated, name):
    clean, run, workload = generated(name), generated(name, BAD_FRACTION), WORKLOADS[name]
    bad_lines = run.bad_lines
    bad = set(bad_lines)
    assert len(run.lines) == len(clean.lines) == run.stats["records"] + run.stats["bad"]
    assert len(bad_lines) == run.stats["bad"] == sum(run.stats["bad_by_kind"].values())
    assert abs(run.stats["bad"] / len(run.lines) - BAD_FRACTION) < 0.01
    assert [line for line in run.lines if line in bad] == bad_lines  # every bad line listed, in order
    kinds = Counter()
    for original, line in zip(clean.lines, run.lines):
        if line == original:  # good lines are the clean run's, at the same place
            assert line not in bad
            continue
        assert line in bad and not conforms_line(line, workload.schema)
        try:
            spoiled = flatten(json.loads(line))
        except json.JSONDecodeError:
            assert original.startswith(line) and len(original) / 5 < len(line) < len(original)  # cut in the middle
            kinds["bad-json"] += 1
            continue
        record = flatten(json.loads(original))
        changed = {key for key in record if key not in spoiled or spoiled[key] != record[key]}
        assert len(changed) == 1
        (field,) = changed
        if field in spoiled:
            assert field in workload.numeric and spoiled[field] == f"x{record[field]}"
            kinds["wrong-type"] += 1
        else:
            assert field in workload.key and set(spoiled) == set(record) - {field}
            kinds["missing-key"] += 1
    assert kinds == Counter(run.stats["bad_by_kind"]) and set(kinds) == KINDS and min(kinds.values()) > 50


def conforms_line(line: str, schema: StructType) -> bool:
    try:
        return conforms(json.loads(line), schema)
    except json.JSONDecodeError:
        return False


@pytest.mark.parametrize("name", WORKLOADS)
def test_same_seed_same_output_other_seed_other_output(tmp_path, name):
    workload = WORKLOADS[name]

    def contents(folder: str, seed: int) -> dict[str, bytes]:
        workload.generate(tmp_path / folder, 50, 35, seed=seed, bad_fraction=0.2, progress=False, **workload.options)
        return {
            str(p.relative_to(tmp_path / folder)): p.read_bytes() for p in (tmp_path / folder).rglob("*") if p.is_file()
        }

    first = contents("a", 7)
    assert contents("b", 7) == first
    other = contents("c", 8)
    assert other.keys() == first.keys() and other["part-00000000.json"] != first["part-00000000.json"]
    assert other["_bad_records.txt"] != first["_bad_records.txt"]


@pytest.mark.parametrize("name", WORKLOADS)
def test_small_chunks_keep_the_order_and_the_counts(tmp_path, monkeypatch, name):
    workload = WORKLOADS[name]
    monkeypatch.setattr(part_files, "CHUNK_RECORDS", 170)  # several chunks per file and files across chunks
    stats = workload.generate(
        tmp_path, 100, 40, seed=1, files_per_second=0.3, bad_fraction=0.05, progress=False, **workload.options
    )
    lines, bad = read_lines(tmp_path), set((tmp_path / "_bad_records.txt").read_text().splitlines())
    records = [json.loads(line) for line in lines if line not in bad]
    assert stats["files"] == 12 and len(lines) == 4000 and len(records) == stats["records"]
    times = [workload.time_ms(r) for r in records]
    assert times == sorted(times) and all(conforms(r, workload.schema) for r in records)
    assert not list(tmp_path.glob(".*"))


@pytest.mark.parametrize("name", WORKLOADS)
def test_no_records_gives_empty_files_and_stale_staging_files_are_replaced(tmp_path, name):
    (tmp_path / ".part-00000001.json.tmp").write_text('{"stale": 1}\n')
    stats = WORKLOADS[name].generate(tmp_path, 0, 3, progress=False)
    assert stats["files"] == 3 and stats["records"] == stats["bad"] == 0
    assert [p.read_text() for p in parts(tmp_path)] == ["", "", ""]
    assert not list(tmp_path.glob(".*"))


@pytest.mark.parametrize("name", WORKLOADS)
def test_invalid_arguments_are_named(tmp_path, name):
    generate, own = WORKLOADS[name].generate, next(iter(WORKLOADS[name].options))
    cases = [
        ({"bad_fraction": 1.0}, "bad_fraction"),
        ({"bad_fraction": -0.1}, "bad_fraction"),
        ({"rate": -1}, "rate"),
        ({"seconds": 0}, "seconds"),
        ({"files_per_second": 0}, "files_per_second"),
        ({own: 0}, own),
    ]
    for change, named in cases:
        with pytest.raises(ValueError, match=named):
            generate(**{"out": tmp_path / "out", "rate": 10, "seconds": 5, **change})
    assert not (tmp_path / "out").exists()


def test_linear_road_vehicles_report_every_30_s_along_the_expressway(tmp_path):
    seconds = 600  # long enough for many vehicles to leave and others to take their place
    stats = generate_lr(tmp_path, 50, seconds, seed=SEED, xways=3, progress=False)
    records = [json.loads(line) for line in read_lines(tmp_path)]
    reports = defaultdict(list)
    for r in records:
        assert r["type"] == 0 and 0 <= r["spd"] <= 100 and 0 <= r["xway"] < 3 and 0 <= r["lane"] <= 4
        assert r["dir"] in (0, 1) and 0 <= r["pos"] <= 527_999 and r["seg"] == r["pos"] // 5280 < 100
        reports[r["vid"]].append(r)
    assert len(records) == 50 * seconds and len(reports) == stats["vehicles"]
    assert {r["xway"] for r in records} == {0, 1, 2}
    entries = sorted((vehicle[0]["time"], vid) for vid, vehicle in reports.items())
    assert [vid for _, vid in entries] == sorted(reports)  # vids in order of entry
    assert sum(t >= seconds - 60 for t, _ in entries) > 50  # new vehicles keep entering
    left = 0
    for vehicle in reports.values():
        assert all(b["time"] - a["time"] == 30 for a, b in zip(vehicle, vehicle[1:]))
        assert len({(r["xway"], r["dir"]) for r in vehicle}) == 1
        for a, b in zip(vehicle, vehicle[1:]):
            moved = (b["pos"] - a["pos"]) * (1 if a["dir"] == 0 else -1)
            assert abs(moved - b["spd"] * 30 * 1609 / 3600) <= 0.5
        if len(vehicle) > 1:
            assert vehicle[0]["lane"] == 0 and all(1 <= r["lane"] <= 3 for r in vehicle[1:-1])
        if vehicle[-1]["time"] + 30 < seconds:  # it left the expressway
            assert vehicle[-1]["lane"] == 4
            left += 1
    assert left > 100 and max(len(v) for v in reports.values()) > 1


def test_linear_road_bounded_fleet_reuses_the_ids_longest_off_the_road(tmp_path):
    seconds, rate, fleet = 600, 50, 1800  # 1,500 vehicles on the road at once, 300 parked
    stats = generate_lr(tmp_path, rate, seconds, seed=SEED, vehicles=fleet, progress=False)
    records = [json.loads(line) for line in read_lines(tmp_path)]
    assert len(records) == rate * seconds and stats["vehicles"] == fleet
    assert {r["vid"] for r in records} == set(range(fleet))
    trips = 0
    reports = defaultdict(list)
    for r in records:
        reports[r["vid"]].append(r)
    for vehicle in reports.values():
        for a, b in zip(vehicle, vehicle[1:]):
            assert b["time"] - a["time"] >= 30  # never on the road twice at once
            if b["time"] - a["time"] > 30:  # back for a new trip: it had left, and it enters on lane 0
                assert a["lane"] == 4 and b["lane"] == 0
                trips += 1
    assert trips > 300  # many ids came back for another trip
    with pytest.raises(ValueError, match="vehicles must be 0 .* at least the 1500"):
        generate_lr(tmp_path / "few", rate, 60, vehicles=1499, progress=False)


def test_nexmark_proportions_hot_auctions_and_references(generated):
    run = generated("nexmark")
    events = run.records()
    assert len(events) == RATE * SECONDS
    expected = [0] + [1] * 3 + [2] * 46
    assert all([e["event_type"] for e in events[b : b + 50]] == expected for b in range(0, len(events), 50))
    total = len(events)
    assert (run.stats["persons"], run.stats["auctions"], run.stats["bids"]) == (
        total // 50,
        3 * total // 50,
        46 * total // 50,
    )
    assert [_nexmark_event(e)["date_time"] for e in events] == [BASE_TIME_MS + n * 1000 // RATE for n in range(total)]
    persons, auctions, newest, hot_bids, hot_bidders = set(), set(), 0, 0, 0
    bids_per_auction = Counter()
    for event in events:
        person, auction, bid = event["person"], event["auction"], event["bid"]
        assert [x is not None for x in (person, auction, bid)] == [k == event["event_type"] for k in range(3)]
        if person:
            assert person["id"] == 1000 + len(persons) and person["state"] in {"AZ", "CA", "ID", "OR", "WA", "WY"}
            persons.add(person["id"])
        elif auction:
            assert auction["id"] == 1000 + len(auctions) and 10 <= auction["category"] <= 14
            assert auction["seller"] in persons and auction["expires"] > auction["date_time"]
            assert 100 <= auction["initial_bid"] < auction["reserve"] <= 2 * 10**8
            auctions.add(auction["id"])
            newest = auction["id"]
        else:
            assert bid["auction"] in auctions and bid["bidder"] in persons and 100 <= bid["price"] <= 10**8
            assert bid["auction"] >= newest - 100  # among the in-flight auctions
            bids_per_auction[bid["auction"]] += 1
            hot_bids += (bid["auction"] - 1000) % 100 == 0
            hot_bidders += (bid["bidder"] - 1000) % 100 == 1
    assert {e["auction"]["category"] for e in events if e["auction"]} == {10, 11, 12, 13, 14}
    bids = sum(bids_per_auction.values())
    assert 0.47 < hot_bids / bids < 0.6 and 0.7 < hot_bidders / bids < 0.85  # hot ratios 2 and 4
    assert bids_per_auction.most_common(1)[0][1] > 50 * bids / len(auctions)  # a hot auction takes a large share
    prices = [e["bid"]["price"] for e in events if e["bid"]]
    assert 3.5 < np.median(np.log10(prices)) < 5.5  # log-uniform over 10**2 .. 10**8
    side = (run.folder / "_side" / "side_input.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in side] == [{"key": k, "value": str(k)} for k in range(50)]


def test_ysb_ads_belong_to_the_campaigns(generated):
    run = generated("ysb")
    mapping = json.loads((run.folder / "_side" / "campaigns.json").read_text())
    assert len(mapping) == 28 and Counter(Counter(mapping.values()).values()) == {4: 7}
    assert all(uuid.UUID(key).version == 4 for key in [*mapping, *mapping.values()])
    events = run.records()
    assert {e["ad_id"] for e in events} == set(mapping)
    assert {e["ad_type"] for e in events} == {"banner", "modal", "sponsored-search", "mail", "mobile"}
    assert {e["event_type"] for e in events} == {"view", "click", "purchase"}
    assert {e["ip_address"] for e in events} == {"1.2.3.4"}
    assert len({e["user_id"] for e in events}) == len({e["page_id"] for e in events}) == 100
    assert [e["event_time"] for e in events] == [BASE_TIME_MS + n * 1000 // RATE for n in range(len(events))]


@pytest.mark.parametrize(
    "name, options",
    [
        ("lr", ["--xways", "2", "--vehicles", "1300"]),
        ("nexmark", ["--side-rows", "30"]),
        ("ysb", ["--campaigns", "3", "--ads-per-campaign", "2"]),
    ],
)
def test_misa_gen_command(tmp_path, capsys, name, options):
    out = tmp_path / name
    args = [
        "gen",
        name,
        "--out",
        str(out),
        "--rate",
        "40",
        "--seconds",
        "6",
        "--seed",
        "9",
        "--files-per-second",
        "0.5",
        "--bad-fraction",
        "0.2",
        *options,
    ]
    assert misa(args) == 0
    summary = capsys.readouterr().out.strip()
    lines, bad = read_lines(out), (out / "_bad_records.txt").read_text().splitlines()
    assert len(summary.splitlines()) == 1 and summary.startswith(f"gen {name}: ")
    assert f"{len(lines) - len(bad)} records and {len(bad)} bad (bad-json " in summary and 0 < len(bad) < len(lines)
    assert "3 files" in summary and str(out) in summary and "event time" in summary and len(parts(out)) == 3
    if name == "lr":
        good = [json.loads(line) for line in lines if line not in bad]
        assert {r["xway"] for r in good} == {0, 1} and max(r["vid"] for r in good) < 1300
    elif name == "nexmark":
        assert len((out / "_side" / "side_input.jsonl").read_text().splitlines()) == 30
    else:
        assert len(json.loads((out / "_side" / "campaigns.json").read_text())) == 6
    assert misa(["gen", name, "--out", str(out), "--rate", "1", "--seconds", "2", "--bad-fraction", "1"]) == 2
    assert "misa: error" in (err := capsys.readouterr().err) and "bad_fraction" in err


def test_nexmark_bids_reach_back_over_the_in_flight_auctions(tmp_path):
    """A long-lived auction table: with 2,000 auctions in flight, bids name auctions far older than 100 back."""
    generate_nexmark(tmp_path, 2000, 20, seed=3, in_flight_auctions=2000, progress=False)
    newest, reach = 0, []
    for part in sorted(tmp_path.glob("part-*.json")):
        for line in part.read_text().splitlines():
            event = json.loads(line)
            if event["auction"]:
                newest = event["auction"]["id"]
            elif event["bid"]:
                reach.append(newest - event["bid"]["auction"])
    assert max(reach) <= 2000 and max(reach) > 1000 and np.mean([r > 100 for r in reach]) > 0.3
    with pytest.raises(ValueError, match="in_flight_auctions must be > 0"):
        generate_nexmark(tmp_path / "bad", 10, 1, in_flight_auctions=0, progress=False)
