"""The hot tier (RecentWrites): it answers with a key's newest write or not at all, keeps the most recent writes within
its size, and never keeps a key space that a batch deleted by range; through the view, reads of recent writes need no
RocksDB look-up and still see every later change."""

from __future__ import annotations

import numpy as np

from common.cache_contract import MISSING
from misa.state.recent_writes import RecentWrites


def _read(tier: RecentWrites, keys: list[bytes]) -> list[object]:
    out: list[object] = [MISSING] * len(keys)
    rest = tier.resolve(keys, list(range(len(keys))), out)
    assert all(out[i] is MISSING for i in rest) and all(
        out[i] is not MISSING for i in set(range(len(keys))) - set(rest)
    )
    return out


def test_the_newest_write_of_a_key_is_read_and_a_delete_reads_as_none():
    tier = RecentWrites(100)
    tier.add({b"ks1": b"a", b"ks2": b"b"}, [])
    tier.add({b"ks1": b"c", b"ks2": None}, [])
    assert _read(tier, [b"ks1", b"ks2", b"ks3"]) == [b"c", None, MISSING]


def test_the_oldest_generation_is_dropped_when_the_young_one_fills():
    tier = RecentWrites(4)  # generations of 2
    tier.add({b"ks1": b"1"}, [])
    tier.add({b"ks2": b"2"}, [])  # young full: it becomes the old generation
    tier.add({b"ks3": b"3", b"ks4": b"4"}, [])  # again: ks1 and ks2 dropped
    assert _read(tier, [b"ks1", b"ks2", b"ks3", b"ks4"]) == [MISSING, MISSING, b"3", b"4"]
    assert len(tier) == 2


def test_a_key_space_deleted_by_range_is_dropped_and_never_kept_again():
    tier = RecentWrites(100)
    tier.add({b"\xfeS1": b"t", b"\xfes1": b"r", b"\xfeS": b"short"}, [])
    tier.add({b"\xfeS2": b"t2"}, [(b"\xfeS", b"\xfeS\x00\x05")])
    assert _read(tier, [b"\xfeS1", b"\xfeS2", b"\xfeS", b"\xfes1"]) == [MISSING, MISSING, MISSING, b"r"]
    tier.add({b"\xfeS3": b"t3", b"\xfes2": b"r2"}, [])
    assert _read(tier, [b"\xfeS3", b"\xfes2"]) == [MISSING, b"r2"]


def test_a_range_reaching_into_a_key_space_skips_it_and_short_keys_in_it():
    tier = RecentWrites(100)
    tier.add({b"\x01": b"one", b"\x01\x00\x07": b"a", b"\x02\x09": b"b", b"\x03": b"c"}, [])
    tier.add({}, [(b"\x00\xff", b"\x01\x00")])  # holds b"\x01" (it sorts before b"\x01\x00")
    assert _read(tier, [b"\x01", b"\x01\x00\x07", b"\x02\x09", b"\x03"]) == [MISSING, MISSING, b"b", b"c"]


def test_a_tier_of_no_entries_keeps_nothing():
    tier = RecentWrites(0)
    tier.add({b"ks1": b"1"}, [])
    assert _read(tier, [b"ks1"]) == [MISSING] and len(tier) == 0


def test_through_the_view_recent_writes_are_read_without_rocksdb_and_agree_with_it(config, tmp_path):
    from misa.runtime.commit import CommitController
    from misa.state.store import StateStore
    from misa.state.view import StateView

    store = StateStore(config, tmp_path / "state", f"file://{tmp_path / 'dfs'}")
    view, plain = StateView(store, recent_entries=64), StateView(store)
    commits = CommitController(store, "sync")
    rng = np.random.default_rng(5)
    reads_below: list[int] = []
    written: set[bytes] = set()
    original = store.get_many

    def counted(keys, parallel=True):
        reads_below.append(len(keys))
        return original(keys, parallel)

    store.get_many = counted  # type: ignore[method-assign]
    try:
        for version in range(1, 30):
            keys = [b"\xfes" + bytes([k]) for k in rng.integers(0, 40, 10)]
            written |= set(keys)
            view.put_many(keys, [None if rng.random() < 0.2 else bytes([version]) for _ in keys])
            if version % 5 == 0:
                view.delete_range(b"\xfes" + bytes([10]), b"\xfes" + bytes([20]))
            commits.commit(view.freeze(version), {})
            wanted = [b"\xfes" + bytes([k]) for k in range(40)]
            reads_below.clear()
            got = view.get_many(wanted)
            # until the space's first range delete (version 5) the tier answers every key written; then none
            assert sum(reads_below) == (len(set(wanted) - written) if version < 5 else len(wanted)), (
                f"version {version}"
            )
            assert got == plain.fetch_below(wanted), f"version {version}"
    finally:
        commits.close()
        view.close()
        store.close()
