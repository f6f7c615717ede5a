"""The journal a new state host catches up from: the requests after the partition's newest durable version, in
order, up to the request being made when its host was lost; nothing of versions every partition made durable."""

from __future__ import annotations

import pyarrow as pa

from misa.hosts.journal import HostJournal, Resend, renewed
from misa.hosts.server import Inbox


def _batch(journal: HostJournal, version: int, token: str) -> None:
    """One batch's requests to two partitions, as the driver makes them."""
    journal.record("follow_watermark", [(version * 10,)] * 2)
    journal.record("apply", [(Inbox(token, ((0, 0),), b""),)] * 2)
    journal.record("observe", [([version], [version])] * 2)
    journal.record("commit", [(version,)] * 2)
    journal.sent(token, Resend(pa.table({"k": [version]}), lambda t: [t["k"]]))


def test_a_new_host_redoes_the_versions_after_its_durable_one_and_the_running_batch_up_to_the_lost_request():
    journal = HostJournal()
    journal.record("claim", [("query", b"op", {})] * 2)
    journal.record("adopt", [(4,)] * 2)
    for version in (5, 6):
        _batch(journal, version, f"t{version}")
    journal.record("follow_watermark", [(70,)] * 2)
    lost_during = journal.record("apply", [(Inbox("t7", ((0, 0),), b""),)] * 2)
    journal.record("call", [("controller", "status")] * 2)  # reads are not recorded

    assert journal.claim == ("query", b"op", {}) and journal.base == 4
    redo = journal.after(5, before=lost_during)
    assert [(r.name, r.args[0][0] if r.name != "apply" else r.args[0][0].token) for r in redo] == [
        ("follow_watermark", 60),
        ("apply", "t6"),
        ("observe", [6]),
        ("commit", 6),
        ("follow_watermark", 70),
    ]
    assert [r.name for r in journal.after(4)][:4] == ["follow_watermark", "apply", "observe", "commit"]
    assert len(journal.after(6)) == 2  # the running batch's follow_watermark and apply


def test_a_host_lost_in_its_commit_is_replaced_from_the_version_before_that_commit():
    """The lost host may have made the version durable before it died (a synchronous commit): the new host must not
    load it, or the batch's requests, redone, would apply the batch twice."""
    journal = HostJournal()
    journal.record("adopt", [(4,)] * 2)
    _batch(journal, 5, "t5")
    journal.record("follow_watermark", [(60,)] * 2)
    journal.record("apply", [(Inbox("t6", ((0, 0),), b""),)] * 2)
    journal.record("observe", [([6], [6])] * 2)
    lost_during = journal.record("commit", [(6,)] * 2)
    assert journal.settled(lost_during) == 5
    assert [r.name for r in journal.after(5, before=lost_during)] == ["follow_watermark", "apply", "observe"]
    assert journal.settled() == 6 and journal.after(6) == []
    assert HostJournal(base=3).settled() == 3 and HostJournal().settled() is None


def test_versions_every_partition_made_durable_are_forgotten_with_their_sendings():
    journal = HostJournal()
    journal.record("adopt", [(4,)] * 2)
    for version in (5, 6, 7):
        _batch(journal, version, f"t{version}")
    journal.durable(6)
    assert journal.base == 6
    assert [r.version for r in journal.requests if r.name == "commit"] == [7]
    assert set(journal.sendings) == {"t7"}
    assert journal.after(6) == journal.requests


def test_inbox_references_are_replaced_by_the_rows_sent_again():
    old = Inbox("t1", ((0, 0),), b"")
    new = Inbox("t2", ((3, 1),), b"")
    assert renewed((old, 5), lambda inbox: new if inbox is old else inbox) == (new, 5)
