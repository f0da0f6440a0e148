"""`accelerate.utils.megatron_lm`: upstream's path for the Megatron-LM names in ``backends/megatron_lm.py``.

They subclass the accelerated optimizer and scheduler, so they live above ``utils/``; this face only
names them.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = dict.fromkeys(
    [
        "AbstractTrainStep",
        "BertTrainStep",
        "GPTTrainStep",
        "MegatronEngine",
        "MegatronLMDummyDataLoader",
        "MegatronLMDummyScheduler",
        "MegatronLMOptimizerWrapper",
        "MegatronLMSchedulerWrapper",
        "T5TrainStep",
        "avg_losses_across_data_parallel_group",
        "finish_mpu_init",
        "gather_across_data_parallel_groups",
        "initialize",
        "model_provider_func",
        "prepare_data_loader",
        "prepare_model_optimizer_scheduler",
        "prepare_optimizer",
        "prepare_scheduler",
    ],
    "accelerate.backends.megatron_lm",
)

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
