"""Process and training state: `PartialState`, `AcceleratorState`, `GradientState`.

Each is one object per process (the constructor returns the shared instance); library code passes
them explicitly, and :func:`reset_state` gives tests a clean slate.
"""

from __future__ import annotations

from accelerate.state.accelerator_state import AcceleratorState, reset_accelerator_state
from accelerate.state.distributed_type import ComputeEnvironment, DistributedType, PrecisionType
from accelerate.state.environment import ClusterEnvironment, detect_environment
from accelerate.state.gradient import GradientState, reset_gradient_state
from accelerate.state.process import PartialState, reset_process_state, split_for_process
from accelerate.state.shared import SharedDict, ThreadLocalSharedDict, do_nothing, is_initialized


def state_is_initialized() -> bool:
    """True once a PartialState (or an Accelerator, which makes one) exists in this process.

    For launchers that fork: a child would inherit that state, process group included.
    """
    from accelerate.state import accelerator_state, process

    state = accelerator_state._ACCEL_STATE or process._STATE
    return state is not None and bool(getattr(state, "_initialized", False))


def wait_for_everyone() -> None:
    """Blocks until every process reaches this call (``PartialState().wait_for_everyone()``).

    Upstream's ``accelerate.utils.wait_for_everyone``; a free function for code without the state at hand.
    """
    PartialState().wait_for_everyone()


def reset_state(destroy_process_group: bool = False) -> None:
    """Forgets every per-process state object (for tests and notebooks)."""
    reset_accelerator_state()
    reset_gradient_state()
    reset_process_state(destroy_process_group=destroy_process_group)


__all__ = [
    "AcceleratorState",
    "ClusterEnvironment",
    "ComputeEnvironment",
    "DistributedType",
    "GradientState",
    "PartialState",
    "PrecisionType",
    "SharedDict",
    "ThreadLocalSharedDict",
    "do_nothing",
    "is_initialized",
    "detect_environment",
    "reset_state",
    "split_for_process",
    "state_is_initialized",
    "wait_for_everyone",
]
