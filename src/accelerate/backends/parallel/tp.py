"""Step 1, tensor parallelism: the model arrives tensor-parallelised; prepare checks that it is."""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.tensor import DTensor

_HOW = (
    "Apply a tensor-parallel plan on accelerator.torch_device_mesh['tp'] before prepare(): "
    "`torch.distributed.tensor.parallel.parallelize_module(model, accelerator.torch_device_mesh['tp'], "
    "{'blocks.0.attn.q': ColwiseParallel(), ...})`, or load a transformers model with "
    "`from_pretrained(..., tp_plan='auto', device_mesh=accelerator.torch_device_mesh['tp'])`."
)


def tensor_parallel_parameters(model: nn.Module) -> int:
    """How many parameters are DTensors on a mesh with a ``tp`` dimension."""
    count = 0
    for param in model.parameters():
        if isinstance(param, DTensor) and "tp" in (param.device_mesh.mesh_dim_names or ()):
            count += 1
    return count


def check_tensor_parallel(model: nn.Module, config: Any) -> None:
    """Raises unless ``model`` carries a tensor-parallel plan when ``config.tp_size > 1``.

    Without one every rank of a tp group would train the whole model on the same batch: the
    result would be right but nothing split, so it is an error rather than a silent slowdown.
    """
    if not config.tp_enabled or not any(p.requires_grad for p in model.parameters()):
        return
    if tensor_parallel_parameters(model) == 0:
        raise ValueError(
            f"ParallelismConfig(tp_size={config.tp_size}) but {type(model).__name__} has no tensor-parallel "
            f"(DTensor) parameters on the 'tp' mesh. {_HOW}"
        )
