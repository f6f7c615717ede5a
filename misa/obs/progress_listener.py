"""A streaming query listener whose progress events reach Python as one JSON string each.

PySpark hands a Python listener each ``QueryProgressEvent`` converted field by field from the JVM object
(``StreamingQueryProgress.fromJObject``): a Py4J round trip per field and per map entry, every map's end a Java
exception turned into a Python one, all of it holding the GIL on Py4J's callback thread while the next batch runs.
On this machine that was 0.1 s or more of Python per batch. :class:`JsonProgressListener` takes the progress as
Spark's own JSON (one call) and builds the same ``StreamingQueryProgress`` from it (``fromJson``, as PySpark's
``StreamingQuery.lastProgress`` does).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent


class _JsonProgressEvents(JStreamingQueryListener):
    """PySpark's Java-facing listener, with progress events read as JSON."""

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": json.loads(jevent.progress().json())}))


class JsonProgressListener(StreamingQueryListener):
    """A ``StreamingQueryListener`` (subclass it as one) that gets its progress events from Spark's JSON."""

    @property
    def _jlistener(self) -> Any:
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            wrapper = SparkContext._jvm.PythonStreamingQueryListenerWrapper  # type: ignore[union-attr]
            self._jlistenerobj = wrapper(_JsonProgressEvents(self))
        return self._jlistenerobj

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
