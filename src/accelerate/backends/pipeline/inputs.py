"""The inputs of a traced pipeline: their shapes, the batch they split into micro-batches, and checks.

As upstream, the example :func:`prepare_pippy` traces is one micro-batch, and a call's batch is
``num_chunks`` of them. torch's tracer records the micro-batch's shapes, and each stage allocates its
receive buffers from them, so a pipeline runs those shapes and nothing else: a different batch would
come back the wrong size, or fail inside one stage while the others wait for it. The first process
therefore checks every call against the example before any process starts the schedule, pads a
short batch with zero rows (the output drops them again), and says what differs otherwise.
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


def _rebatch(description: Any, rows: int | None) -> Any:
    """``description`` with the batch dimension (the first) of each tensor set to ``rows``."""
    if rows is None:
        return description

    def _resize(spec: TensorSpec) -> TensorSpec:
        return TensorSpec((rows, *spec.shape[1:]), spec.dtype) if spec.shape else spec

    return recursively_apply(_resize, description, test_type=lambda x: isinstance(x, TensorSpec))


def pad_batch(data: Any, rows: int, full: int) -> Any:
    """``data`` with each batch-first tensor of ``rows`` rows padded with zero rows to ``full`` (as upstream)."""

    def _pad(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() == 0 or tensor.shape[0] != rows or full <= rows:
            return tensor
        return torch.cat([tensor, tensor.new_zeros((full - rows, *tensor.shape[1:]))])

    return recursively_apply(_pad, data)


def drop_padding(output: Any, rows: int, full: int) -> Any:
    """``output`` without the rows :func:`pad_batch` added: each tensor of ``full`` rows keeps its first ``rows``."""
    return recursively_apply(lambda t: t[:rows] if t.dim() > 0 and t.shape[0] == full else t, output)


@dataclass(frozen=True)
class InputSignature:
    """The example micro-batch a pipeline was traced with, and the check of each later call against it.

    As upstream, the example is ONE micro-batch: a call's batch holds ``num_chunks`` of them (every
    tensor input is batch-first), and a shorter batch is padded with zero rows to that size, the
    padding being dropped from the output. Positional inputs must match one for one, in everything
    but the batch size. A keyword input that holds tensors must be passed every time; one that holds
    none (``use_cache=False``) was fixed when tracing, so it may be left out, and passing another
    value is an error. Only the tensor inputs reach the first stage, which takes nothing else.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None  # of the example: one micro-batch
    num_chunks: int = 1

    @classmethod
    def of(cls, args: tuple[Any, ...], kwargs: dict[str, Any], num_chunks: int) -> InputSignature:
        return cls(
            describe(tuple(args)), describe(dict(kwargs)), find_pippy_batch_size(args, kwargs), num_chunks
        )

    @property
    def full_batch(self) -> int | None:
        """The batch size each call runs as: ``num_chunks`` micro-batches of the example's size."""
        return None if self.batch_size is None else self.batch_size * self.num_chunks

    def __str__(self) -> str:
        parts = [_show(a) for a in self.args] + [f"{k}={_show(v)}" for k, v in self.kwargs.items()]
        return f"({', '.join(parts)})"

    def feed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any], int | None]:  # fmt: skip
        """What the first stage gets for this call: ``(args, kwargs, rows)``, padded to a full batch.

        ``rows`` is the call's own batch size (the output keeps that many rows); the keyword inputs
        are the tensor ones only.

        Raises:
            ValueError: naming every difference from the example, and how to run other shapes.
        """
        rows = find_pippy_batch_size(args, kwargs)
        problems: list[str] = []
        expected_args = _rebatch(self.args, rows)
        if len(args) != len(self.args):
            problems.append(f"{len(args)} positional inputs were passed, the example had {len(self.args)}")
        else:
            for index, (value, expected) in enumerate(zip(describe(tuple(args)), expected_args, strict=True)):
                if value != expected:
                    problems.append(f"positional input {index} is {_show(value)}, expected {_show(expected)}")
        extra = sorted(set(kwargs) - set(self.kwargs))
        if extra:
            problems.append(f"keyword inputs {extra} were not in the example")
        fed: dict[str, Any] = {}
        for key, example in self.kwargs.items():
            expected = _rebatch(example, rows)
            if key not in kwargs:
                if holds_tensor(expected):
                    problems.append(f"keyword input {key!r} is missing (the example had {_show(example)})")
                continue
            value = describe(kwargs[key])
            if value != expected:
                problems.append(f"keyword input {key!r} is {_show(value)}, expected {_show(expected)}")
            elif holds_tensor(expected):
                fed[key] = kwargs[key]
        full = self.full_batch
        if full is not None and rows is not None and rows > full:
            problems.append(f"its batch size {rows} is more than {full}")
        if problems:
            micro = f"{self.num_chunks} micro-batches of {self.batch_size} rows, " if self.batch_size else ""
            raise ValueError(
                f"This model was split by prepare_pippy for batches of {micro}each like its example {self} "
                f"(a traced pipeline runs those shapes only; shorter batches are padded); this call differs: "
                f"{'; '.join(problems)}. Pass inputs shaped like the example with at most {full} rows (split "
                "larger batches), or call prepare_pippy again with an example micro-batch of the new shape."
            )
        if full is None or rows is None or rows == full:
            return tuple(args), fed, rows
        return tuple(pad_batch(tuple(args), rows, full)), pad_batch(fed, rows, full), rows
