"""Pipeline-parallel inference (PiPPy) at upstream's path.

Splitting a model into pipeline stages across processes is meant for one GPU per process, and this
release does not implement it: the functions below keep upstream's signatures and raise the one
hardware error (:func:`accelerate.utils.errors.hardware_only`). ``find_pippy_batch_size`` answers
for real.
"""

from __future__ import annotations

from typing import Any

from accelerate.utils.errors import hardware_only

_pippy = hardware_only("pipeline-parallel inference (PiPPy)", "one CUDA GPU per process")


def find_pippy_batch_size(args: Any, kwargs: Any) -> int | None:
    """The batch size of the first tensor found in ``args``, then in ``kwargs`` (None if there is none)."""
    from accelerate.utils.tree import find_batch_size

    for group in (args, kwargs):
        if group:
            size = find_batch_size(group)
            if size is not None:
                return size
    return None


@_pippy
def generate_device_map(
    model: Any, num_processes: int = 1, no_split_module_classes: Any = None, max_memory: Any = None
) -> Any: ...


@_pippy
def build_pipeline(model: Any, split_points: Any, args: Any, kwargs: Any, num_chunks: int) -> Any: ...


@_pippy
def pippy_forward(forward: Any, num_chunks: int, gather_output: bool, *args: Any, **kwargs: Any) -> Any: ...


@_pippy
def prepare_pippy(
    model: Any,
    split_points: Any = "auto",
    no_split_module_classes: Any = None,
    example_args: Any = (),
    example_kwargs: Any = None,
    num_chunks: int | None = None,
    gather_output: bool = False,
) -> Any: ...
