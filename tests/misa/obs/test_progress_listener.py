"""A listener taking its progress events as Spark's JSON gets the progress PySpark's own listener gets, field for
field, for a stateful query with a watermark and an observed metric."""

from __future__ import annotations

import json
import threading
from typing import Any

from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

from misa.obs.progress_listener import JsonProgressListener


class _Collect:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.done = threading.Event()

    def progress(self, event: Any) -> None:
        self.events.append(event.progress)
        if len(self.events) >= 2:
            self.done.set()


def test_progress_from_json_equals_pysparks_conversion(spark, tmp_path):
    by_json, by_object = _Collect(), _Collect()

    class ByJson(JsonProgressListener):
        def onQueryProgress(self, event: Any) -> None:
            by_json.progress(event)

    class ByObject(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            by_object.progress(event)

        def onQueryTerminated(self, event: Any) -> None:
            pass

    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(2):
        (inputs / f"{i}.json").write_text("".join(json.dumps({"k": k % 3, "t": i * 10 + k}) + "\n" for k in range(6)))
    rows = spark.readStream.schema("k long, t long").option("maxFilesPerTrigger", 1).json(str(inputs))
    counted = (
        rows.withColumn("ts", F.timestamp_seconds("t"))
        .withWatermark("ts", "5 seconds")
        .groupBy("k")
        .count()
        .observe("seen", F.count(F.lit(1)).alias("rows"))
    )
    listeners = [ByJson(), ByObject()]
    for listener in listeners:
        spark.streams.addListener(listener)
    try:
        query = (
            counted.writeStream.outputMode("update")
            .format("noop")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert by_json.done.wait(60) and by_object.done.wait(60)
    finally:
        for listener in listeners:
            spark.streams.removeListener(listener)
    for mine, theirs in zip(by_json.events, by_object.events):
        assert (mine.batchId, mine.id, mine.runId, mine.timestamp) == (
            theirs.batchId,
            theirs.id,
            theirs.runId,
            theirs.timestamp,
        )
        assert mine.durationMs == theirs.durationMs and mine.eventTime == theirs.eventTime
        assert mine.numInputRows == theirs.numInputRows == 6
        assert [s.numRowsTotal for s in mine.stateOperators] == [s.numRowsTotal for s in theirs.stateOperators]
        assert mine.stateOperators[0].numRowsTotal > 0
        assert mine.observedMetrics["seen"]["rows"] == theirs.observedMetrics["seen"]["rows"] == 3  # the groups updated
        assert json.loads(mine.json) == json.loads(theirs.json)
