"""The Spark UI's names of misa's jobs: each batch's Spark jobs are described by the misa phase they serve."""

from __future__ import annotations

from pyspark.sql import DataFrame


def describe_jobs(batch: DataFrame, text: str) -> None:
    """Describe the Spark jobs this thread starts from now on as ``text`` (the Spark UI's job description); one
    call into the JVM, no restore: the thread running ``foreachBatch`` starts only the batch's jobs."""
    batch.sparkSession.sparkContext.setJobDescription(text)
