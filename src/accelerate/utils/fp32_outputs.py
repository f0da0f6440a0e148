"""fp32 outputs from a half-precision forward: what mixed precision wraps a prepared model's forward in.

Under autocast a model computes in fp16/bf16 and returns half-precision tensors; the loss and the
metrics computed from them should not be. The wrapper turns every fp16/bf16 floating tensor of the
output (in any nesting) into fp32 and leaves the rest alone.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from typing import Any

import torch

from accelerate.utils.tree import recursively_apply

_HALF = (torch.float16, torch.bfloat16)


def _is_half(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in _HALF


def convert_to_fp32(tensor: Any) -> Any:
    """Each fp16/bf16 tensor of a nested structure as fp32; other leaves unchanged.

    Example:
        >>> convert_to_fp32({"logits": torch.ones(2, dtype=torch.float16), "ids": torch.arange(2)})
        {'logits': tensor([1., 1.]), 'ids': tensor([0, 1])}
    """
    if isinstance(tensor, torch.Tensor):  # the common case, without the walk
        return tensor.float() if tensor.dtype in _HALF else tensor
    return recursively_apply(lambda t: t.float(), tensor, test_type=_is_half)


class ConvertOutputsToFp32:
    """A callable that runs ``model_forward`` and returns its outputs through :func:`convert_to_fp32`.

    It looks like the forward it wraps (``functools.update_wrapper``). Pickling it raises: a model
    whose forward is wrapped should be saved through its ``state_dict`` (or unwrapped first with
    ``accelerator.unwrap_model(model, keep_fp32_wrapper=False)``).
    """

    def __init__(self, model_forward: Callable[..., Any]) -> None:
        self.model_forward = model_forward
        functools.update_wrapper(self, model_forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(self.model_forward(*args, **kwargs))

    def __getstate__(self) -> Any:
        raise pickle.PicklingError(
            "Cannot pickle a model whose forward is wrapped for mixed precision (ConvertOutputsToFp32). "
            "Unwrap it first with `accelerator.unwrap_model(model, keep_fp32_wrapper=False)`, or save "
            "`model.state_dict()` instead."
        )


def convert_outputs_to_fp32(model_forward: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps ``model_forward`` so half-precision floating outputs come back as fp32.

    Returns a plain function (a bound method's stand-in on the model); its ``__wrapped__`` is the
    :class:`ConvertOutputsToFp32` doing the work.
    """
    converter = ConvertOutputsToFp32(model_forward)

    @functools.wraps(model_forward)
    def forward(*args: Any, **kwargs: Any) -> Any:
        return convert_to_fp32(model_forward(*args, **kwargs))

    forward.__wrapped__ = converter
    return forward


__all__ = ["ConvertOutputsToFp32", "convert_outputs_to_fp32", "convert_to_fp32"]
