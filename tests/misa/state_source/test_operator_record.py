"""The operator recorded beside a state: pickled once per definition, its record written last; one that cannot be
pickled is recorded as such, and a reader is told why."""

from __future__ import annotations

import threading

import pytest

from misa.exceptions import StateSourceError
from misa.operators.aggregation import Agg, Aggregation
from misa.state_source.operator_record import load_operator, operator_bytes, read_record, record_operator


def test_an_operator_is_recorded_once_per_definition_and_loads_back(tmp_path):
    url = f"file://{tmp_path}"
    operator = Aggregation(["k"], [Agg("n", "count", "*")])
    record_operator(url, operator, {"operator": "Aggregation"})
    record_operator(url, operator, {"operator": "Aggregation"})
    assert len(list(tmp_path.glob("operator-*.pickle"))) == 1
    record = read_record(url)
    assert record.signature == {"operator": "Aggregation"}
    assert load_operator(operator_bytes(url, record)).aggs == operator.aggs


class Locked:
    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_an_operator_that_cannot_be_pickled_is_recorded_as_such(tmp_path):
    record_operator(f"file://{tmp_path}", Locked(), {"operator": "Locked"})
    with pytest.raises(StateSourceError, match="was not recorded: Locked cannot be pickled"):
        read_record(f"file://{tmp_path}")


def test_a_state_without_a_record_or_with_a_damaged_one_names_the_fix(tmp_path):
    with pytest.raises(StateSourceError, match="run the query once with this release"):
        read_record(f"file://{tmp_path}")
    (tmp_path / "operator.json").write_text("{not json")
    with pytest.raises(StateSourceError, match="is damaged"):
        read_record(f"file://{tmp_path}")
