"""NVIDIA Transformer Engine (fp8) at upstream's path.

Converting or running a model with Transformer Engine needs an fp8-capable NVIDIA GPU and
transformer-engine, so those functions raise the one hardware error
(:func:`accelerate.utils.errors.hardware_only`); whether a model holds Transformer Engine layers is
answered here (never, without transformer-engine).
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate.utils.errors import hardware_only
from accelerate.utils.imports import is_transformer_engine_available

_te = hardware_only(
    "fp8 with Transformer Engine", "an NVIDIA GPU with fp8 support and `pip install transformer-engine`"
)


def has_transformer_engine_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds Transformer Engine layers (LayerNorm, Linear, TransformerLayer)."""
    if not is_transformer_engine_available():
        return False
    import transformer_engine.pytorch as te

    kinds = (te.LayerNorm, te.Linear, te.TransformerLayer)
    return any(isinstance(module, kinds) for module in model.modules())


@_te
def convert_model(
    model: torch.nn.Module,
    to_transformer_engine: bool = True,
    _convert_linear: bool = True,
    _convert_ln: bool = True,
) -> Any: ...


@_te
def contextual_fp8_autocast(model_forward: Any, fp8_recipe: Any, use_during_eval: bool = False) -> Any: ...


@_te
def apply_fp8_autowrap(model: torch.nn.Module, fp8_recipe_handler: Any) -> Any: ...
