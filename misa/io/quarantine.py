"""Bad input records, set aside per batch: the runtime side of :class:`misa.runtime.batch_input.BadRecordFilter`.

The input is read as text and parsed with :func:`parse_json_lines`, which keeps each record's raw
line (``_raw_record``) and flags it (``_bad_record``). A record is bad when

* its line is not a JSON object (truncated or otherwise malformed JSON, an array, a bare value),
* a field has the wrong type (``"spd": "x17"`` or ``"spd": 2.5`` for an integer, an out-of-range
  number), whether or not the job reads that field, or
* a required field is missing or null.

Blank lines are not records (Spark's JSON source skips them too). :class:`Quarantine` writes each
batch's bad records, the exact raw input lines in UTF-8, one per line, as a text file under
``ROOT/batch_id=N/`` (any location; see :mod:`misa.io.batch_output`, which also refuses a batch
folder that a symbolic link leads elsewhere), so a replayed batch replaces its own lines whole; a
batch without bad records has no committed lines (a replay that finds none removes an earlier
attempt's). It passes the good rows on without the two extra columns; :func:`good_records` is the
same filter for plain Spark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from misa.io.batch_output import BatchFolders

RAW_COLUMN = "_raw_record"
BAD_COLUMN = "_bad_record"
_CORRUPT = "_corrupt_record"
_PARSED = "_parsed"


def parse_json_lines(lines: DataFrame, schema: StructType, required: Sequence[str] = ()) -> DataFrame:
    """The JSON lines of a text DataFrame (column ``value``) as ``schema``'s columns, the raw line and the bad flag."""
    unknown = [c for c in required if c not in schema.names]
    if unknown:
        raise ValueError(f"required columns {unknown} are not in the input schema {schema.names}")
    if _CORRUPT in schema.names:
        raise ValueError(f"the input schema may not have a column named {_CORRUPT}")
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
    parsed = F.col(_PARSED)
    bad = parsed.isNull() | parsed.getField(_CORRUPT).isNotNull()
    for column in required:
        bad = bad | parsed.getField(column).isNull()
    return (
        lines.where(F.trim(F.col("value")) != "")
        .select(
            F.col("value").alias(RAW_COLUMN),
            F.from_json("value", StructType([*schema.fields, StructField(_CORRUPT, StringType())]), options).alias(
                _PARSED
            ),
        )
        .select(*[parsed.getField(f.name).alias(f.name) for f in schema.fields], RAW_COLUMN, bad.alias(BAD_COLUMN))
    )


def good_records(parsed: DataFrame) -> DataFrame:
    """The good records of :func:`parse_json_lines`' output, with the input schema's columns only."""
    return parsed.where(~F.col(BAD_COLUMN)).drop(RAW_COLUMN, BAD_COLUMN)


class Quarantine:
    """Writes each batch's bad records under ``root`` (one folder per batch id) and returns the good rows."""

    def __init__(self, root: str | Path):
        self.folders = BatchFolders(root)

    def good(self, batch: DataFrame) -> DataFrame:
        """The batch's good rows, without the raw line and the bad flag."""
        if BAD_COLUMN not in batch.columns or RAW_COLUMN not in batch.columns:
            raise ValueError(
                f"the batch has no {BAD_COLUMN}/{RAW_COLUMN} columns: read the input with "
                "misa.parse_json_lines (see docs/extending.md, 'Bad records in your own job')"
            )
        return good_records(batch)

    def bad_count(self) -> Column:
        """The number of bad records, as an aggregate over the batch."""
        return F.count(F.when(F.col(BAD_COLUMN), F.lit(1)))

    def write_aside(self, batch: DataFrame, batch_id: int, bad: int) -> None:
        """Write the batch's bad lines under ``batch_id`` (a Spark job only when ``bad`` > 0); with none,
        remove what an earlier attempt of the batch wrote."""
        lines = [row[0] for row in batch.where(F.col(BAD_COLUMN)).select(RAW_COLUMN).collect()] if bad else []
        if len(lines) != bad:
            raise RuntimeError(f"batch {batch_id}: {bad} bad records were counted but {len(lines)} were read back")
        self._write(batch_id, lines)

    def _write(self, batch_id: int, lines: list[str]) -> None:
        if lines:
            self.folders.commit(batch_id, {"part-00000.txt": "".join(line + "\n" for line in lines).encode()})
        else:
            self.folders.remove(batch_id)


def read_quarantine(root: str | Path) -> list[str]:
    """Every quarantined line under ``root``, in batch id order."""
    folders = BatchFolders(root)
    return [
        line for _, paths in folders.committed() for p in paths for line in folders.read(p).decode().split("\n")[:-1]
    ]
