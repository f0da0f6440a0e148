"""fp8 training with Microsoft's MS-AMP (fp8-capable NVIDIA GPUs).

MS-AMP converts one model and its optimizer together (``msamp.initialize``), so ``prepare()``
hands it the pair before anything else; msamp is imported only here and only when that runs.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate.precision.fp8.te import require_fp8_gpu
from accelerate.utils.imports import is_msamp_available


def require_msamp(where: str) -> None:
    require_fp8_gpu("MSAMP", "msamp", is_msamp_available(), where)


def initialize_together(objects: list[Any], opt_level: str, device: torch.device) -> list[Any]:
    """``objects`` with its one model and one optimizer replaced by MS-AMP's fp8 versions.

    A call with neither (a dataloader alone) comes back as it is; otherwise raises ``ValueError``
    unless exactly one model and one optimizer are among them (MS-AMP converts a pair; prepare them
    in the same ``prepare()`` call).
    """
    models = [i for i, obj in enumerate(objects) if isinstance(obj, torch.nn.Module)]
    optimizers = [i for i, obj in enumerate(objects) if isinstance(obj, torch.optim.Optimizer)]
    if not models and not optimizers:
        return objects
    require_msamp("prepare()")
    import msamp  # type: ignore[import-not-found]  # optional, GPU-only; no stubs

    if len(models) != 1 or len(optimizers) != 1:
        raise ValueError(
            f"fp8 with MS-AMP converts one model and its optimizer together: pass both to one prepare() "
            f"call (got {len(models)} model(s) and {len(optimizers)} optimizer(s))."
        )
    result = list(objects)
    model = result[models[0]].to(device)
    result[models[0]], result[optimizers[0]] = msamp.initialize(
        model, result[optimizers[0]], opt_level=opt_level
    )
    return result
