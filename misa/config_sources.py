"""Where MiSA's settings come from: ``spark.misa.*`` keys of a mapping, a Spark properties file or a Spark
session, turned into the typed values of :class:`~misa.config_keys.Settings`' fields. An unknown key is refused
with the nearest known one."""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Mapping

from misa.config_checks import parse_setting
from misa.config_keys import Settings
from misa.exceptions import ConfigError

PREFIX = "spark.misa."


def typed_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``{field name: typed value}`` of the ``spark.misa.*`` keys in ``{key: text}``; other keys are ignored."""
    by_key = {f.metadata["key"]: f for f in dataclasses.fields(Settings)}
    parsed: dict[str, Any] = {}
    for key, raw in values.items():
        if not key.startswith(PREFIX):
            continue
        if key not in by_key:
            close = difflib.get_close_matches(key, by_key, n=1)
            hint = f"; did you mean {close[0]}?" if close else "; known keys are listed in conf/misa-defaults.conf"
            raise ConfigError(f"unknown configuration key {key}{hint}")
        parsed[by_key[key].name] = parse_setting(by_key[key], str(raw))
    return parsed


def session_values(spark: Any = None) -> dict[str, str]:
    """A SparkSession's settings (default: the active session's; none without one): its launch conf (``--conf``,
    spark-defaults.conf, the builder's ``.config``), overridden by ``spark.conf.set`` in the session."""
    if spark is None:
        from pyspark.sql import SparkSession  # here: importing misa.config stays light

        spark = SparkSession.getActiveSession()
        if spark is None:
            return {}
    values = dict(spark.sparkContext.getConf().getAll())
    values.update({k: v for k, v in spark.conf.getAll.items() if k.startswith(PREFIX)})
    return values


def read_properties(text: str) -> dict[str, str]:
    """Parse the Spark properties format."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"([^\s=:]+)\s*[\s=:]\s*(.*)$", line)
        values[match.group(1) if match else line] = match.group(2).strip() if match else ""
    return values
