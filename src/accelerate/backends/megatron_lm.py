"""Megatron-LM integration (upstream path `accelerate.utils.megatron_lm`): names with upstream's signatures, no implementation.

Megatron-LM needs NVIDIA GPUs and megatron-core, so every function here, and constructing any
class, raises the one hardware error (see :func:`accelerate.utils.errors.hardware_only`) naming
what is missing. ``accelerate.utils.is_megatron_lm_available()`` answers whether megatron-core is
installed.
"""

from __future__ import annotations

from typing import Any

import torch

from accelerate.backends.spec import BackendRequest, BackendSpec
from accelerate.optimizer import AcceleratedOptimizer
from accelerate.scheduler import AcceleratedScheduler
from accelerate.utils.errors import NotAvailableYetError, hardware_only

_megatron = hardware_only("Megatron-LM", "NVIDIA GPUs and `pip install megatron-core`")


@_megatron
class MegatronLMDummyDataLoader:
    """Stands in for the dataloader when Megatron-LM builds its own datasets."""

    def __init__(self, **dataset_kwargs: Any) -> None: ...

    def set_megatron_data_args(self) -> Any: ...

    def get_train_valid_test_datasets_provider(self, accelerator: Any) -> Any: ...

    def build_train_valid_test_data_iterators(self, accelerator: Any) -> Any: ...


@_megatron
class MegatronLMDummyScheduler:
    """Stands in for the scheduler when Megatron-LM schedules the learning rate itself."""

    def __init__(
        self, optimizer: Any, total_num_steps: int | None = None, warmup_num_steps: int = 0, **kwargs: Any
    ) -> None: ...


@_megatron
class AbstractTrainStep:
    """Base of the per-architecture train steps: batch, forward and loss functions for Megatron-LM."""

    def __init__(self, name: str) -> None: ...

    def get_batch_func(self, accelerator: Any, megatron_dataset_flag: bool) -> Any: ...

    def get_forward_step_func(self) -> Any: ...

    def get_loss_func(self, accelerator: Any) -> Any: ...


@_megatron
class BertTrainStep(AbstractTrainStep):
    def __init__(self, accelerator: Any, args: Any) -> None: ...

    def get_batch_func(self, accelerator: Any, megatron_dataset_flag: bool) -> Any: ...

    def get_forward_step_func(self, pretraining_flag: bool, bert_binary_head: bool) -> Any:  # type: ignore[override]
        ...

    def get_loss_func(self, accelerator: Any, pretraining_flag: bool, num_labels: int) -> Any:  # type: ignore[override]
        ...


@_megatron
class GPTTrainStep(AbstractTrainStep):
    def __init__(self, accelerator: Any, args: Any) -> None: ...


@_megatron
class T5TrainStep(AbstractTrainStep):
    def __init__(self, accelerator: Any, args: Any) -> None: ...


@_megatron
class MegatronEngine(torch.nn.Module):
    """The Megatron-LM model, optimizer and scheduler behind one module (what ``prepare`` returns)."""

    def __init__(self, accelerator: Any, model: Any, optimizer: Any, scheduler: Any) -> None: ...

    def get_module_config(self) -> Any: ...

    def get_batch_data_iterator(self, batch_data: Any) -> Any: ...

    def train_step(self, **batch_data: Any) -> Any: ...

    def eval_step(self, **batch_data: Any) -> Any: ...

    def forward(self, **batch_data: Any) -> Any: ...

    def log_eval_results(self) -> Any: ...

    def save_checkpoint(self, output_dir: str) -> Any: ...

    def load_checkpoint(self, input_dir: str) -> Any: ...


@_megatron
class MegatronLMOptimizerWrapper(AcceleratedOptimizer):
    def __init__(self, optimizer: Any) -> None: ...


@_megatron
class MegatronLMSchedulerWrapper(AcceleratedScheduler):
    def __init__(self, scheduler: Any, optimizers: Any) -> None: ...


@_megatron
def initialize(accelerator: Any, extra_args_provider: Any = None, args_defaults: Any = None) -> Any: ...


@_megatron
def finish_mpu_init() -> Any: ...


@_megatron
def model_provider_func(
    pre_process: bool = True, post_process: bool = True, add_encoder: bool = True, add_decoder: bool = True
) -> Any: ...


@_megatron
def prepare_model_optimizer_scheduler(accelerator: Any) -> Any: ...


@_megatron
def prepare_data_loader(accelerator: Any, dataloader: Any) -> Any: ...


@_megatron
def prepare_optimizer(accelerator: Any, model: Any) -> Any: ...


@_megatron
def prepare_scheduler(accelerator: Any, optimizer: Any, scheduler: Any) -> Any: ...


@_megatron
def avg_losses_across_data_parallel_group(losses: Any) -> Any: ...


@_megatron
def gather_across_data_parallel_groups(tensor: Any) -> Any: ...


# The names `accelerate.utils` exports these under.
megatron_lm_initialize = initialize
megatron_lm_prepare_data_loader = prepare_data_loader
megatron_lm_prepare_model_optimizer_scheduler = prepare_model_optimizer_scheduler
megatron_lm_prepare_optimizer = prepare_optimizer
megatron_lm_prepare_scheduler = prepare_scheduler


class MegatronLMSpec(BackendSpec):
    """The backend table's row: asked by ``megatron_lm_plugin``, which it refuses (not available yet)."""

    label = "Megatron-LM"

    def check(self, request: BackendRequest) -> None:
        raise NotAvailableYetError(
            "Accelerator(megatron_lm_plugin=...) is not available yet in this accelerate (--use_megatron_lm "
            "likewise). Remove it to train with DistributedDataParallel, which needs no plugin."
        )


spec = MegatronLMSpec()
