"""Batches without data asked for and told apart (:mod:`misa.runtime.watermark_sync`), on fakes of Spark's session,
the request source and the operator: no Spark."""

from __future__ import annotations

from types import SimpleNamespace

from misa.runtime.watermark_sync import WatermarkSync


class _NoData:
    """The request source: which batches were requested, and which Spark made of a request alone."""

    def __init__(self, request_only: set[int]):
        self.requested: list[int] = []
        self.asked: list[int] = []
        self._request_only = request_only

    def request(self, after_batch: int) -> None:
        self.requested.append(after_batch)

    def is_no_data_batch(self, batch_id: int) -> bool:
        self.asked.append(batch_id)
        return batch_id in self._request_only


class _Operator:
    """Evicts in batches without data; its own watermark moves as told."""

    def __init__(self, moves: bool):
        self.watermark = SimpleNamespace(moves=lambda: moves)

    def no_data_batch(self, view):
        return None

    def event_watermark(self):
        return self.watermark


def _spark(no_data_batches: str = "true") -> SimpleNamespace:
    conf = {"spark.sql.streaming.noDataMicroBatches.enabled": no_data_batches}
    return SimpleNamespace(conf=SimpleNamespace(get=lambda key, default: conf.get(key, default)))


def _started(no_data: _NoData, operator: object, spark: SimpleNamespace, partitions: object = None) -> WatermarkSync:
    sync = WatermarkSync(no_data, operator, partitions)  # type: ignore[arg-type]
    sync.reset()
    sync.started(spark, query=None)  # type: ignore[arg-type]  # a stream without withWatermark: Spark's is not read
    return sync


def test_after_a_batch_whose_watermark_moved_the_next_may_be_a_batch_without_data():
    no_data = _NoData(request_only={4})
    sync = _started(no_data, _Operator(moves=True), _spark())
    assert sync.without_data(3, first=False) is False and no_data.asked == []  # nothing requested: not asked
    sync.after_batch(3)
    assert no_data.requested == [3]
    assert sync.without_data(4, first=False) is True and no_data.asked == [4]
    assert sync.without_data(0, first=True) is False and no_data.asked == [4, 0]  # a start's first batch may be one
    sync.reset()  # a restart forgets the request
    assert sync.without_data(4, first=False) is False


def test_nothing_is_requested_when_the_watermark_stays_or_spark_runs_no_batches_without_data():
    for operator, spark in ((_Operator(moves=False), _spark()), (_Operator(moves=True), _spark("false"))):
        no_data = _NoData(request_only=set())
        sync = _started(no_data, operator, spark)
        sync.after_batch(3)
        assert no_data.requested == []


def test_with_key_partitions_their_watermark_decides():
    no_data = _NoData(request_only=set())
    partitions = SimpleNamespace(watermark_moves=lambda: True)
    sync = _started(no_data, _Operator(moves=False), _spark(), partitions)
    sync.after_batch(7)
    assert no_data.requested == [7]
