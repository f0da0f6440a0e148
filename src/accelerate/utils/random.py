"""Public module path ``accelerate.utils.random``: seeding and RNG synchronisation across processes.

A lazy face: both need this process's rank or a broadcast, so they live in
:mod:`accelerate.collectives.rng` and load on first use.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = dict.fromkeys(
    ["set_seed", "synchronize_rng_state", "synchronize_rng_states"], "accelerate.collectives.rng"
)

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
