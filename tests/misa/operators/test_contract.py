"""The operator contract: hints are a capability an operator declares (:class:`HintSource`), not a guess."""

from __future__ import annotations

import inspect
import logging
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from misa.config import MisaConfig
from misa.job import StatefulJob
from misa.operators import aggregation, interval_join, keyed, lookup_aggregation
from misa.operators.base import HintSource, OperatorResult
from prefetch.hints import HintSpec, no_hints


class Undeclared:
    """An operator with the hint methods' names that does not declare the capability."""

    def deltas(self, batch):
        return batch

    def apply(self, deltas, state):
        return OperatorResult(deltas)

    def signature(self, schema):
        return {}

    def metadata(self):
        return {}

    def restore(self, metadata):
        pass

    def hint_spec(self) -> HintSpec:
        return HintSpec(("k",))

    def hint_keys(self, hints: pa.Table) -> tuple[list[bytes], np.ndarray]:
        return no_hints()


class Declared(Undeclared, HintSource):
    pass


def test_every_built_in_operator_with_hint_methods_declares_the_capability():
    hinting = [
        cls
        for module in (aggregation, interval_join, keyed, lookup_aggregation)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__ and "hint_keys" in vars(cls)
    ]
    assert {cls.__name__ for cls in hinting} == {
        "Aggregation", "IntervalJoin", "LookupJoin", "TopN", "KeyedJoin", "LookupAggregation"
    }  # fmt: skip
    assert all(issubclass(cls, HintSource) for cls in hinting)


def test_the_capability_is_declared_not_inferred_from_method_names():
    assert isinstance(Declared(), HintSource) and not isinstance(Undeclared(), HintSource)


def test_a_hint_source_must_name_its_keys_and_takes_the_rows_as_they_are_by_default():
    class SpecOnly(HintSource):
        def hint_spec(self) -> HintSpec:
            return HintSpec(("k",))

    with pytest.raises(TypeError, match="hint_keys"):
        SpecOnly()  # type: ignore[abstract]
    rows = object()
    assert Declared().hint_input(rows) is rows  # type: ignore[arg-type]


@pytest.mark.parametrize(("operator", "hinted"), [(Declared(), True), (Undeclared(), False)])
def test_a_job_prefetches_only_for_a_declared_hint_source(tmp_path, caplog, operator, hinted):
    config = replace(MisaConfig(), prefetch_mode="true", cache_policy="tac")
    with caplog.at_level(logging.WARNING, logger="misa.runtime.job_parts"):
        job = StatefulJob(operator, lambda batch_id, table: None, str(tmp_path / "ckpt"), config=config, echo=None)
    try:
        assert (job.hints is not None) == hinted
        warned = [r.getMessage() for r in caplog.records if "does not declare misa.HintSource" in r.getMessage()]
        assert warned == (
            []
            if hinted
            else [
                "Undeclared has hint methods but does not declare misa.HintSource: it "
                "runs without prefetching (subclass HintSource to prefetch its state keys)"
            ]
        )
    finally:
        job.close()
