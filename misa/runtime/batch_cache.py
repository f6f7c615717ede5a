"""A state view as configured: its read cache, its memory tier and its prefetcher."""

from __future__ import annotations

from typing import Any

from misa.config import MisaConfig
from misa.operators.base import MemoryResident
from misa.state.memory_tier import MemoryTier
from misa.state.store import StateStore, shard_of
from misa.state.view import StateView
from prefetch.cache import StateCache
from prefetch.manager import PrefetchManager


def new_view(store: StateStore, config: MisaConfig, operator: Any) -> StateView:
    """The view of ``operator``'s state in ``store``: the configured read cache and, when the operator names key
    spaces for it (:class:`MemoryResident`) and ``spark.misa.state.memoryTier.maxBytes`` is not 0, a memory tier."""
    spaces = operator.memory_spaces() if isinstance(operator, MemoryResident) else []
    memory = MemoryTier(spaces, config.memory_tier_max_bytes) if spaces and config.memory_tier_max_bytes else None
    return StateView(store, new_cache(config), memory=memory)


def new_cache(config: MisaConfig) -> StateCache | None:
    """The read cache as configured: a :class:`StateCache` with an eviction order, or none."""
    policy = config.effective_cache_policy
    return None if policy == "none" else StateCache(config.cache_max_bytes, policy)


def attach_prefetcher(
    view: StateView, threads: int, chunk_keys: int, cache_bytes: int, *, active: bool = True
) -> PrefetchManager:
    """A prefetch manager serving ``view``'s reads (from now if ``active``); its cache is the view's
    read cache, or a TAC of ``cache_bytes`` of its own when the view has none (``spark.misa.cache.policy=auto``).

    The pool's threads fetch one chunk (one shard) each; what a read must fetch itself (chunks no
    thread started yet, keys nobody hinted) it fetches with the shards in parallel.
    """
    cache = view.cache
    if cache is None:
        cache = StateCache(cache_bytes, "tac")
    shards = view.store.shards
    manager = PrefetchManager(
        cache,
        lambda keys: view.fetch_below(keys, parallel=False),
        lambda key: shard_of(key, shards),
        threads,
        chunk_keys,
        read_fetch=lambda keys: view.fetch_below(keys, parallel=True),
    )
    view.enable_prefetch(manager, active=active)
    return manager
