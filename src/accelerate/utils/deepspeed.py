"""`accelerate.utils.deepspeed`: upstream's DeepSpeed helpers, by name and signature.

DeepSpeed is not available in this release yet (it comes as its own backend). Every name keeps
upstream's signature, so clients import it (transformers subclasses ``HfDeepSpeedConfig``), and any
use (constructing a class, calling a function) raises the one
:class:`~accelerate.utils.errors.NotAvailableYetError` made by :func:`hardware_only`.
"""

from __future__ import annotations

from typing import Any

from accelerate.optimizer import AcceleratedOptimizer
from accelerate.scheduler import AcceleratedScheduler
from accelerate.utils.errors import NotAvailableYetError, hardware_only, requires_hardware

_FEATURE = "DeepSpeed"
_NEEDS = "the DeepSpeed backend, which this release does not have yet (train with DistributedDataParallel: drop the DeepSpeed plugin/config/flags)"
_deepspeed = hardware_only(_FEATURE, _NEEDS)


def deepspeed_unavailable(where: str) -> NotAvailableYetError:
    """The error for ``where`` (a call or argument) asking for DeepSpeed."""
    return requires_hardware(f"{_FEATURE} (`{where}`)", _NEEDS)


@_deepspeed
class HfDeepSpeedConfig:
    """A DeepSpeed configuration (file or dict) with lookup helpers."""

    def __init__(self, config_file_or_dict: Any) -> None: ...

    def set_stage_and_offload(self) -> None: ...

    def find_config_node(self, ds_key_long: str) -> Any: ...

    def get_value(self, ds_key_long: str, default: Any = None) -> Any: ...

    def del_config_sub_tree(self, ds_key_long: str, must_exist: bool = False) -> None: ...

    def is_true(self, ds_key_long: str) -> Any: ...

    def is_false(self, ds_key_long: str) -> Any: ...

    def is_zero2(self) -> Any: ...

    def is_zero3(self) -> Any: ...

    def is_offload(self) -> Any: ...


@_deepspeed
class DeepSpeedEngineWrapper:
    """Runs backward and the step through a DeepSpeed engine."""

    def __init__(self, engine: Any) -> None: ...

    def backward(self, loss: Any, sync_gradients: bool = True, **kwargs: Any) -> None: ...

    def get_global_grad_norm(self) -> Any: ...


@_deepspeed
class DeepSpeedOptimizerWrapper(AcceleratedOptimizer):
    """An optimizer whose step the DeepSpeed engine takes."""

    def __init__(self, optimizer: Any) -> None: ...


@_deepspeed
class DeepSpeedSchedulerWrapper(AcceleratedScheduler):
    """A scheduler whose step the DeepSpeed engine takes."""

    def __init__(self, scheduler: Any, optimizers: Any) -> None: ...


@_deepspeed
class DummyOptim:
    """Stands for the optimizer a DeepSpeed config file defines."""

    def __init__(self, params: Any, lr: float = 0.001, weight_decay: float = 0, **kwargs: Any) -> None: ...


@_deepspeed
class DummyScheduler:
    """Stands for the scheduler a DeepSpeed config file defines."""

    def __init__(
        self, optimizer: Any, total_num_steps: int | None = None, warmup_num_steps: int = 0,
        lr_scheduler_callable: Any = None, **kwargs: Any,
    ) -> None: ...  # fmt: skip


@_deepspeed
def get_active_deepspeed_plugin(state: Any) -> Any: ...


@_deepspeed
def map_pytorch_optim_to_deepspeed(optimizer: Any) -> Any: ...
