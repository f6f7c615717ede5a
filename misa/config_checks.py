"""Checks of MiSA's settings: one setting's text parsed into its typed value, every typed value in its range, and
the settings that are valid alone but not together. Each failure is a :class:`ConfigError` naming the key, the
value and the expected form."""

from __future__ import annotations

import dataclasses
from typing import Any

from misa.config_forms import Kind, duration_text
from misa.config_keys import Settings
from misa.exceptions import ConfigError


def parse_setting(spec: dataclasses.Field, text: str) -> Any:
    """The typed value of one setting's ``text``; a ConfigError naming the key, the text and the form when
    it is malformed or out of range."""
    kind: Kind = spec.metadata["kind"]
    try:
        value = kind.parse(text)
    except ValueError:
        raise ConfigError(f"{spec.metadata['key']}={text!r} is malformed: expected {kind.form}") from None
    if not kind.accepts(value):
        raise _out_of_range(spec, text)
    return value


def check(config: Settings) -> None:
    """Refuse ``config`` when a typed value lies outside its key's range (values given typed, not as text, are
    checked here too) or two settings contradict each other."""
    for spec in dataclasses.fields(config):
        value = getattr(config, spec.name)
        if not spec.metadata["kind"].accepts(value):
            raise _out_of_range(spec, spec.metadata["kind"].show(value))
    _check_combinations(config)


def _check_combinations(config: Settings) -> None:
    """Settings valid alone but not together."""
    if config.retry_max_backoff_s < config.retry_initial_backoff_s:
        raise ConfigError(
            f"spark.misa.checkpoint.retry.maxBackoff={duration_text(config.retry_max_backoff_s)!r} is below "
            f"spark.misa.checkpoint.retry.initialBackoff={duration_text(config.retry_initial_backoff_s)!r}: "
            "the longest wait between two DFS attempts must be at least the first"
        )
    if config.state_standby_replicas and config.state_placement != "executors":
        raise ConfigError(
            f"spark.misa.state.standbyReplicas={config.state_standby_replicas} needs "
            f"spark.misa.state.placement=executors (standbys are state hosts on other executors), but the placement "
            f"is {config.state_placement}: set the placement to executors, or the replicas to 0"
        )
    if config.state_standby_replicas and config.commit_mode == "nocommit":
        raise ConfigError(
            f"spark.misa.state.standbyReplicas={config.state_standby_replicas} with spark.misa.commit.mode=nocommit: "
            "that mode keeps no checkpoint a standby could take over from; use another mode, or 0 replicas"
        )
    if config.prefetch_mode == "true" and config.cache_policy == "none":
        raise ConfigError(
            "spark.misa.prefetch.enabled=true needs a state cache to prefetch into, but "
            "spark.misa.cache.policy is none: set the policy to auto, tac, lru or clock, or "
            "spark.misa.prefetch.enabled=false (or auto, which stays off without a cache)"
        )


def _out_of_range(spec: dataclasses.Field, shown: str) -> ConfigError:
    """The error for a setting whose value (written as ``shown``) lies outside its range."""
    return ConfigError(f"{spec.metadata['key']}={shown!r} is out of range: expected {spec.metadata['kind'].form}")
