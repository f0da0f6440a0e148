"""The inputs of a traced pipeline: their shapes, the batch they split into micro-batches, and checks.

torch's tracer records one micro-batch's shapes, and each stage allocates its receive buffers from
them, so a pipeline runs the shapes it was traced with and nothing else: a different batch would
come back the wrong size, or fail inside one stage while the others wait for it. The first process
therefore checks every call against the example :func:`prepare_pippy` traced, before any process
starts the schedule, and says what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from accelerate.utils.tree import ignorant_find_batch_size, recursively_apply


@dataclass(frozen=True)
class TensorSpec:
    """What the pipeline knows of a tensor: its shape and dtype (picklable, comparable)."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"tensor{list(self.shape)} ({self.dtype})"


def describe(data: Any) -> Any:
    """``data`` with each tensor replaced by its :class:`TensorSpec`; other leaves are kept."""
    return recursively_apply(lambda t: TensorSpec(tuple(t.shape), t.dtype), data)


def holds_tensor(description: Any) -> bool:
    """Whether a :func:`describe` result names at least one tensor."""
    found: list[TensorSpec] = []
    recursively_apply(found.append, description, test_type=lambda x: isinstance(x, TensorSpec))
    return bool(found)


def find_pippy_batch_size(args: Any, kwargs: Any) -> int | None:
    """The batch size of the first input holding a tensor: ``args`` in order, then ``kwargs``' values.

    None when no input holds a tensor.

    Example:
        >>> find_pippy_batch_size((torch.zeros(4, 7),), {})
        4
    """
    inputs = [*(args or ()), *(kwargs or {}).values()]
    for value in inputs:
        size = ignorant_find_batch_size(value)
        if size is not None:
            return size
    return None


def check_divisible(args: Any, kwargs: Any, num_chunks: int, what: str) -> int | None:
    """The batch size of ``args``/``kwargs``, after checking it splits into ``num_chunks`` equal micro-batches.

    Raises:
        ValueError: the batch size is not a multiple of ``num_chunks``.
    """
    batch = find_pippy_batch_size(args, kwargs)
    if batch is not None and batch % num_chunks != 0:
        divisors = [d for d in range(1, batch + 1) if batch % d == 0]
        raise ValueError(
            f"{what} has a batch size of {batch}, which does not split into num_chunks={num_chunks} equal "
            f"micro-batches: use a batch size that is a multiple of {num_chunks}, or num_chunks from {divisors}."
        )
    return batch


def first_micro_batch(args: tuple[Any, ...], kwargs: dict[str, Any], num_chunks: int) -> tuple[tuple[Any, ...], dict[str, Any]]:  # fmt: skip
    """The first of the ``num_chunks`` micro-batches the schedule will cut from ``args``/``kwargs``.

    Cut by torch's own splitter, so the traced shapes are exactly the ones each stage will receive.
    """
    from torch.distributed.pipelining.microbatch import split_args_kwargs_into_chunks

    chunks_args, chunks_kwargs = split_args_kwargs_into_chunks(args, kwargs, num_chunks)
    return tuple(chunks_args[0]), dict(chunks_kwargs[0])


def _show(description: Any) -> str:
    return str(description) if isinstance(description, TensorSpec) else repr(description)


@dataclass(frozen=True)
class InputSignature:
    """The example a pipeline was traced with, and the check of each later call against it.

    Positional inputs must match one for one. A keyword input that holds tensors must be passed
    every time; one that holds none (``use_cache=False``) was fixed when tracing, so it may be left
    out, and passing another value is an error. Only the tensor inputs reach the first stage, which
    takes nothing else.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None
    num_chunks: int = 1

    @classmethod
    def of(cls, args: tuple[Any, ...], kwargs: dict[str, Any], num_chunks: int) -> InputSignature:
        return cls(
            describe(tuple(args)), describe(dict(kwargs)), find_pippy_batch_size(args, kwargs), num_chunks
        )

    def __str__(self) -> str:
        parts = [_show(a) for a in self.args] + [f"{k}={_show(v)}" for k, v in self.kwargs.items()]
        return f"({', '.join(parts)})"

    def feed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keyword inputs to send to the first stage, after checking the call matches the example.

        Raises:
            ValueError: naming every difference from the example, and how to run other shapes.
        """
        problems: list[str] = []
        if len(args) != len(self.args):
            problems.append(f"{len(args)} positional inputs were passed, the example had {len(self.args)}")
        else:
            for index, (value, expected) in enumerate(zip(describe(tuple(args)), self.args, strict=True)):
                if value != expected:
                    problems.append(
                        f"positional input {index} is {_show(value)}, the example's was {_show(expected)}"
                    )
        extra = sorted(set(kwargs) - set(self.kwargs))
        if extra:
            problems.append(f"keyword inputs {extra} were not in the example")
        fed: dict[str, Any] = {}
        for key, expected in self.kwargs.items():
            if key not in kwargs:
                if holds_tensor(expected):
                    problems.append(f"keyword input {key!r} is missing (the example had {_show(expected)})")
                continue
            value = describe(kwargs[key])
            if value != expected:
                problems.append(
                    f"keyword input {key!r} is {_show(value)}, the example's was {_show(expected)}"
                )
            elif holds_tensor(expected):
                fed[key] = kwargs[key]
        if problems:
            micro = f", {self.num_chunks} micro-batches of {self.batch_size // self.num_chunks}" if self.batch_size else ""  # fmt: skip
            raise ValueError(
                f"This model was split by prepare_pippy for inputs like its example {self} (batch size "
                f"{self.batch_size}{micro}), and a traced pipeline runs those shapes only; this call differs: "
                f"{'; '.join(problems)}. Pass inputs shaped like the example (pad the last batch), or call "
                "prepare_pippy again with an example of the new shape."
            )
        return fed
