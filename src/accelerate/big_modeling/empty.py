"""`init_empty_weights` / `init_on_device`: create a model's parameters on another device (meta).

A model built under ``init_empty_weights()`` has its parameters on the meta device (shapes and
dtypes, no memory), so a 70B-parameter skeleton costs nothing until a checkpoint is loaded into it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool | None = None) -> Iterator[None]:
    """Parameters (and buffers if ``include_buffers``) registered inside the block go to ``device``.

    ``include_buffers=None`` reads ``ACCELERATE_INIT_INCLUDE_BUFFERS`` (default: False), as upstream.

    Example:
        >>> with init_on_device("meta"):
        ...     model = nn.Linear(10_000, 10_000)  # no memory allocated
    """
    device = torch.device(device)
    if include_buffers is None:
        include_buffers = _env_flag("ACCELERATE_INIT_INCLUDE_BUFFERS")
    if include_buffers:
        # torch's own device context also covers buffers and plain tensor factories.
        with device:
            yield
        return
    original = nn.Module.register_parameter

    def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        # A parameter already there (e.g. one being tied: ``head.weight = embed.weight``) is kept as
        # the same object, so ties made while building survive.
        if param is not None and param.device != device:
            kwargs: dict[str, Any] = dict(param.__dict__)
            kwargs["requires_grad"] = param.requires_grad
            moved = type(param)(param.to(device), **kwargs)
            module._parameters[name] = moved

    nn.Module.register_parameter = register_parameter  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def init_empty_weights(include_buffers: bool | None = None) -> contextlib.AbstractContextManager[None]:
    """Builds models with parameters on the meta device (no memory); load weights afterwards.

    Buffers stay real unless ``include_buffers`` (``None``: the ``ACCELERATE_INIT_INCLUDE_BUFFERS``
    environment variable, default False).

    Example:
        >>> with init_empty_weights():
        ...     model = MyModel()  # parameters on meta
        >>> model = load_checkpoint_and_dispatch(model, "ckpt/", device_map="auto")
    """
    return init_on_device("meta", include_buffers=include_buffers)


def _env_flag(name: str) -> bool:
    # A user-facing switch of upstream's, read at the call (not a launcher-to-runtime variable).
    import os

    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
