"""torchao float8 training at upstream's path.

Converting a model to float8 needs an fp8-capable GPU and torchao, so that raises the one hardware
error (:func:`accelerate.utils.errors.hardware_only`). The layer filters that decide which linear
layers would be converted are plain module inspection and work here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from accelerate.utils.errors import hardware_only
from accelerate.utils.imports import is_torchao_available


def find_first_last_linear_layers(model: torch.nn.Module) -> tuple[str | None, str | None]:
    """Qualified names of the first and the last ``nn.Linear`` in ``model`` (registration order)."""
    names = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    return (names[0], names[-1]) if names else (None, None)


def filter_linear_layers(module: torch.nn.Module, fqn: str, layers_to_filter: Sequence[str | None]) -> bool:
    """Whether the layer ``fqn`` should be converted to float8.

    Linear layers whose input or output size is not a multiple of 16 are kept in high precision
    (the float8 matmul kernels need that alignment), and so is every name in ``layers_to_filter``.
    """
    if isinstance(module, torch.nn.Linear) and (module.in_features % 16 or module.out_features % 16):
        return False
    return fqn not in layers_to_filter


def filter_first_and_last_linear_layers(module: torch.nn.Module, fqn: str) -> bool:
    """:func:`filter_linear_layers` that also keeps the model's first and last linear layers in high
    precision (converting them costs the most accuracy); both are looked up within ``module``.
    """
    first, last = find_first_last_linear_layers(module)
    return filter_linear_layers(module, fqn, layers_to_filter=[first, last])


def has_ao_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds torchao ``Float8Linear`` layers (never, without torchao)."""
    if not is_torchao_available():
        return False
    from torchao.float8.float8_linear import Float8Linear

    return any(isinstance(module, Float8Linear) for module in model.modules())


@hardware_only(
    "fp8 training with torchao",
    "an NVIDIA GPU with fp8 support (Ada/Hopper or newer) and `pip install torchao`",
)
def convert_model_to_fp8_ao(
    model: torch.nn.Module, config: Any = None, module_filter_func: Any = None
) -> Any: ...
