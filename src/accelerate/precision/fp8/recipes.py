"""The fp8 recipe settings a script hands to ``Accelerator(kwargs_handlers=[...])``.

One dataclass per fp8 library (torchao, Transformer Engine, MS-AMP) plus upstream's older
``FP8RecipeKwargs``. Their public home is ``accelerate.utils.dataclasses``, which re-exports them.

Pure data: nothing here reads ``os.environ`` or imports torch at module import (the launcher's
``ACCELERATE_FP8_*`` variables are turned into these objects by ``precision/fp8/resolve.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

FP8Format = Literal["HYBRID", "E4M3", "E5M2"]
AmaxComputeAlgorithm = Literal["max", "most_recent"]
OptLevel = Literal["O1", "O2"]
Backend = Literal["MSAMP", "TE"]


class FP8BackendType(str, enum.Enum):
    """The libraries that can run fp8 training."""

    NO = "NO"
    TE = "TE"
    MSAMP = "MSAMP"
    AO = "AO"


class _Recipe:
    """``to_dict`` / ``to_kwargs`` like the other kwargs handlers."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def to_kwargs(self) -> dict[str, Any]:
        """Only the fields that differ from a default-constructed object."""
        default = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if v != default[k]}


def _check_choice(owner: str, name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{owner}({name}={value!r}) must be one of {', '.join(map(repr, allowed))}.")


# Transformer Engine's usual defaults, filled into unset fields.
_TE_DEFAULTS: dict[str, Any] = {
    "use_autocast_during_eval": False,
    "margin": 0,
    "interval": 1,
    "fp8_format": "HYBRID",
    "amax_history_len": 1024,
    "amax_compute_algo": "most_recent",
    "override_linear_precision": (False, False, False),
    "use_mxfp8_block_scaling": False,
}


@dataclass
class TERecipeKwargs(_Recipe):
    """Transformer Engine's fp8 recipe (``Accelerator(mixed_precision="fp8", kwargs_handlers=[...])``).

    Unset fields take Transformer Engine's usual defaults: margin 0, interval 1, ``HYBRID`` format,
    1024 steps of amax history computed with ``most_recent``, no precision overrides.
    Needs an fp8-capable NVIDIA GPU and transformer-engine when the Accelerator uses it.
    """

    use_autocast_during_eval: bool | None = None
    margin: int | None = None
    interval: int | None = None
    fp8_format: FP8Format | None = None
    amax_history_len: int | None = None
    amax_compute_algo: AmaxComputeAlgorithm | None = None
    override_linear_precision: tuple[bool, bool, bool] | None = None
    use_mxfp8_block_scaling: bool | None = None

    def __post_init__(self) -> None:
        for name, value in _TE_DEFAULTS.items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        self.fp8_format = self.fp8_format.upper()  # type: ignore[union-attr, assignment]
        _check_choice(type(self).__name__, "fp8_format", self.fp8_format, ("HYBRID", "E4M3", "E5M2"))
        _check_choice(
            type(self).__name__, "amax_compute_algo", self.amax_compute_algo, ("max", "most_recent")
        )


@dataclass
class MSAMPRecipeKwargs(_Recipe):
    """MS-AMP's fp8 optimisation level (``O1``: fp8 weights and gradients; ``O2``: also the optimizer).

    Needs an fp8-capable NVIDIA GPU and msamp when the Accelerator uses it.
    """

    opt_level: OptLevel | None = None

    def __post_init__(self) -> None:
        if self.opt_level is None:
            self.opt_level = "O2"
        _check_choice(type(self).__name__, "opt_level", self.opt_level, ("O1", "O2"))


@dataclass
class AORecipeKwargs(_Recipe):
    """torchao's float8 training settings; runs on CPU as well as on fp8 GPUs.

    Args:
        config: a ``torchao.float8.Float8LinearConfig``; None builds one from the two flags below.
        module_filter_func: ``(module, fully_qualified_name) -> bool``, whether a layer is converted;
            None keeps the first and last linear layers and those whose sizes are not multiples of 16
            in high precision.
        pad_inner_dim: pad the inner matmul dimension to a multiple of 16 (unset: False).
        enable_fsdp_float8_all_gather: under FSDP2, all-gather the weights in float8 (unset: True
            under FSDP2; it changes nothing without FSDP2). Ignored when ``config`` is given.
    """

    config: Any = None
    module_filter_func: Callable[..., bool] | None = None
    pad_inner_dim: bool | None = None
    enable_fsdp_float8_all_gather: bool | None = None


@dataclass
class FP8RecipeKwargs(_Recipe):
    """The older single fp8 recipe: ``backend="TE"`` or ``"MSAMP"`` picks which fields matter."""

    opt_level: OptLevel | None = None
    use_autocast_during_eval: bool | None = None
    margin: int | None = None
    interval: int | None = None
    fp8_format: FP8Format | None = None
    amax_history_len: int | None = None
    amax_compute_algo: AmaxComputeAlgorithm | None = None
    override_linear_precision: tuple[bool, bool, bool] | None = None
    use_mxfp8_block_scaling: bool | None = None
    backend: Backend | None = None

    def __post_init__(self) -> None:
        if self.backend is not None:
            self.backend = self.backend.upper()  # type: ignore[assignment]
            _check_choice(type(self).__name__, "backend", self.backend, ("MSAMP", "TE"))

    def to_recipe(self) -> TERecipeKwargs | MSAMPRecipeKwargs:
        """The equivalent per-library recipe (``backend`` unset means Transformer Engine)."""
        if self.backend == "MSAMP":
            return MSAMPRecipeKwargs(opt_level=self.opt_level)
        te = {name: getattr(self, name) for name in _TE_DEFAULTS}
        return TERecipeKwargs(**te)


RECIPE_TYPES: tuple[type, ...] = (AORecipeKwargs, TERecipeKwargs, MSAMPRecipeKwargs, FP8RecipeKwargs)
