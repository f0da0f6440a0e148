"""Seeding and RNG synchronisation across processes."""

from __future__ import annotations

import random
from collections.abc import Iterable

import numpy as np
import torch


def set_seed(seed: int, device_specific: bool = False, deterministic: bool = False) -> None:
    """Seeds python's ``random``, numpy and torch (CPU and every CUDA device).

    Args:
        seed: the seed.
        device_specific: add the process index, so each process draws different numbers
            (for data augmentation, say) while runs stay reproducible.
        deterministic: also ask torch for deterministic algorithms.
    """
    if device_specific:
        from accelerate.collectives.communicator import current_communicator

        seed += current_communicator().rank
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too
    if deterministic:
        torch.use_deterministic_algorithms(True)


def synchronize_rng_state(rng_type: str | None = None, generator: torch.Generator | None = None) -> None:
    """Copies process 0's state of one RNG to every process.

    ``rng_type``: ``"torch"`` (the global CPU RNG; also what None means), ``"cuda"`` or
    ``"generator"`` (``generator``'s state). Nothing happens in one process.
    """
    from accelerate.collectives.communicator import current_communicator
    from accelerate.collectives.operations import broadcast_object_list

    kind = str(getattr(rng_type, "value", rng_type) or "torch").lower()
    if kind not in ("torch", "cuda", "generator"):
        raise ValueError(f"synchronize_rng_state(rng_type={rng_type!r}): use 'torch', 'cuda' or 'generator'")
    if not current_communicator().is_distributed:
        return
    if kind == "torch":
        state = torch.get_rng_state()
    elif kind == "cuda":
        if not torch.cuda.is_available():
            return
        state = torch.cuda.get_rng_state()
    else:
        if generator is None:
            return
        state = generator.get_state()
    holder: list[torch.Tensor] = [state]  # an object broadcast works on every backend and device
    broadcast_object_list(holder, from_process=0)
    state = holder[0]
    if kind == "torch":
        torch.set_rng_state(state)
    elif kind == "cuda":
        torch.cuda.set_rng_state(state)
    elif generator is not None:
        generator.set_state(state)


def synchronize_rng_states(rng_types: Iterable[str], generator: torch.Generator | None = None) -> None:
    """Synchronises each RNG of ``rng_types`` from process 0."""
    for rng_type in rng_types:
        synchronize_rng_state(rng_type, generator=generator)
