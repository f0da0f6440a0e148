"""Options of the parallelism styles (tensor, context, sequence parallel), with upstream's fields.

``TorchTensorParallelPlugin`` becomes ``ParallelismConfig(tp_size=...)`` (with upstream's deprecation
warning); the context-parallel options reach torch's ring attention on CUDA; DeepSpeed's sequence
parallelism is refused by the resolver with its reason. Re-exported by ``accelerate.utils.dataclasses``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass
class TorchTensorParallelConfig:
    """Tensor-parallel options (``ParallelismConfig(tp_handler=...)``)."""

    enable_async_tp: bool = False


@dataclass
class TorchContextParallelConfig:
    """Context-parallel options (``ParallelismConfig(cp_handler=...)``); context parallelism runs on CUDA only."""

    cp_comm_strategy: Literal["allgather", "alltoall"] | None = None

    def __post_init__(self) -> None:
        if self.cp_comm_strategy is None:
            self.cp_comm_strategy = "allgather"
        if self.cp_comm_strategy not in ("allgather", "alltoall"):
            raise ValueError(
                f"TorchContextParallelConfig(cp_comm_strategy={self.cp_comm_strategy!r}) must be "
                "'allgather' or 'alltoall'."
            )


@dataclass
class DeepSpeedSequenceParallelConfig:
    """DeepSpeed-Ulysses sequence-parallel options (``ParallelismConfig(sp_handler=...)``)."""

    sp_seq_length: int | None = None
    sp_seq_length_is_variable: bool | None = None
    sp_attn_implementation: str | None = None


@dataclass
class TorchTensorParallelPlugin:
    """The older tensor-parallel plugin, deprecated as upstream: ``Accelerator(torch_tp_plugin=plugin)``
    warns (FutureWarning) and runs ``ParallelismConfig(tp_size=plugin.tp_size)`` when no
    ``parallelism_config`` is given (state/parallelism_env.py). Pure data: it builds no mesh."""

    tp_size: int = 1
    torch_device_mesh: Any = None


def get_module_class_from_name(module: Any, name: str) -> type | None:
    """The class named ``name`` among ``module`` and its submodules (first found, depth first), or None.

    Example:
        >>> get_module_class_from_name(bert, "BertLayer")
        <class 'transformers.models.bert.modeling_bert.BertLayer'>
    """
    if type(module).__name__ == name:
        return type(module)
    for child in module.children():
        found = get_module_class_from_name(child, name)
        if found is not None:
            return found
    return None
