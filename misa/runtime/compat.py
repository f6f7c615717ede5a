"""State compatibility: the operator's signature stored with each version is compared with the configured
operator's at start, so that state written by another definition is refused instead of misread.

A signature is a plain JSON dict (each operator's ``signature``: its kind, key columns and types,
aggregations in order with their inputs and types, window, slide, lateness, output mode, state
layout, key-space version). Anything outside it may change between runs (the upstream's other
columns, the query name, configuration keys).
"""

from __future__ import annotations

import logging
from typing import Any

from misa.exceptions import IncompatibleStateError

log = logging.getLogger(__name__)
Signature = dict[str, Any]


def changes(stored: Signature, current: Signature) -> list[str]:
    """What differs, field by field (``"aggregations changed: was [...], now [...]"``); another kind of
    operator is one change."""
    fields = ["operator"] if stored.get("operator") != current.get("operator") else [*stored, *current]
    return [
        f"{name.replace('_', ' ')} changed: was {_show(stored.get(name))}, now {_show(current.get(name))}"
        for name in dict.fromkeys(fields)
        if stored.get(name) != current.get(name)
    ]


def check_compatible(stored: Signature | None, current: Signature, version: int, state: str) -> None:
    """Refuse state ``version`` (at ``state``) written by an incompatible operator; state written before
    signatures were stored (``stored`` None) is accepted with a warning."""
    if stored is None:
        log.warning(
            "state version %d (%s) records no operator signature (written before signatures were stored): it is "
            "used unchecked; from the next version on, the operator's definition is recorded and checked",
            version,
            state,
        )
        return
    found = changes(stored, current)
    if found:
        raise IncompatibleStateError(
            f"the state at version {version} ({state}) was written by another definition of the operator: "
            f"{'; '.join(found)}. This state cannot be read with the new definition, so the query was not started. "
            f"Either keep the old definition, or start the changed query from a new checkpoint location (with new "
            f"state locations), which starts its state from scratch."
        )


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return f"[{', '.join(_show(v) for v in value)}]"
    return str(value)
