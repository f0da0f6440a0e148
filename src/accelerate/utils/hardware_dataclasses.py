"""Configuration objects of hardware- or service-only features: Megatron-LM.

They can be built, printed and compared like any configuration (a script that creates them still
imports and runs up to the point of use), but handing one to the ``Accelerator`` raises the one
hardware error (:func:`accelerate.utils.errors.requires_hardware`) naming what the feature needs.
Their public home is ``accelerate.utils.dataclasses``, which re-exports everything here.

Pure data: nothing here reads ``os.environ`` or imports torch at module import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from accelerate.utils.errors import NotAvailableYetError, hardware_only, requires_hardware

_MEGATRON_NEEDS = "NVIDIA GPUs and `pip install megatron-core`"


class _HardwareConfig:
    """What the hardware-only configuration objects share: ``to_dict`` / ``to_kwargs`` like the kwargs
    handlers, and :meth:`refuse_use`, the error the Accelerator raises when given one.
    """

    feature = "this feature"
    needs = "hardware this machine lacks"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def to_kwargs(self) -> dict[str, Any]:
        """Only the fields that differ from a default-constructed object."""
        default = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if v != default[k]}

    def refuse_use(self, where: str) -> NotAvailableYetError:
        return requires_hardware(f"{self.feature} ({where} got {type(self).__name__})", self.needs)


# ---- Megatron-LM. ----

MODEL_CONFIGS_TO_MEGATRON_PARSERS: dict[str, Callable[..., Any]] = {}

_P = TypeVar("_P", bound=Callable[..., Any])


def add_model_config_to_megatron_parser(model_type: str) -> Callable[[_P], _P]:
    """Decorator: registers a function that fills a MegatronLMPlugin from a ``model_type`` model's config."""

    def register(parser: _P) -> _P:
        MODEL_CONFIGS_TO_MEGATRON_PARSERS[model_type] = parser
        return parser

    return register


_megatron = hardware_only("Megatron-LM", _MEGATRON_NEEDS)


@add_model_config_to_megatron_parser("megatron-bert")
@_megatron
def parse_bert_config(megatron_lm_plugin: Any, model: Any, batch_data: Any) -> Any: ...


@add_model_config_to_megatron_parser("gpt2")
@_megatron
def parse_gpt2_config(megatron_lm_plugin: Any, model: Any, batch_data: Any) -> Any: ...


@add_model_config_to_megatron_parser("t5")
@_megatron
def parse_t5_config(megatron_lm_plugin: Any, model: Any, batch_data: Any) -> Any: ...


@add_model_config_to_megatron_parser("llama")
@_megatron
def parse_llama_config(megatron_lm_plugin: Any, model: Any, batch_data: Any) -> Any: ...


@add_model_config_to_megatron_parser("glm4_moe")
@_megatron
def parse_glm4_moe_config(megatron_lm_plugin: Any, model: Any, batch_data: Any) -> Any: ...


@dataclass
class MegatronLMPlugin(_HardwareConfig):
    """Megatron-LM's tensor/pipeline/sequence parallel settings.

    Holds the configuration only: ``Accelerator(megatron_lm_plugin=...)`` and the ``set_*`` methods
    raise the hardware error, since Megatron-LM needs NVIDIA GPUs and megatron-core.
    """

    feature, needs = "Megatron-LM", _MEGATRON_NEEDS

    tp_degree: Any = None
    pp_degree: Any = None
    use_custom_fsdp: Any = None
    overlap_cpu_optimizer_d2h_h2d: Any = None
    no_load_optim: Any = None
    eod_mask_loss: Any = None
    no_save_optim: Any = None
    optimizer_cpu_offload: Any = None
    use_precision_aware_optimizer: Any = None
    decoder_last_pipeline_num_layers: Any = None
    recompute_granularity: Any = None
    recompute_method: Any = None
    recompute_num_layers: Any = None
    attention_backend: Any = None
    expert_model_parallel_size: Any = None
    context_parallel_size: Any = None
    attention_dropout: Any = None
    hidden_dropout: Any = None
    attention_softmax_in_fp32: Any = None
    expert_tensor_parallel_size: Any = None
    calculate_per_token_loss: Any = None
    use_rotary_position_embeddings: Any = None
    num_micro_batches: Any = None
    gradient_clipping: Any = None
    sequence_parallelism: Any = None
    recompute_activations: Any = None
    use_distributed_optimizer: Any = None
    pipeline_model_parallel_split_rank: Any = None
    num_layers_per_virtual_pipeline_stage: Any = None
    is_train_batch_min: bool = True
    train_iters: Any = None
    train_samples: Any = None
    weight_decay_incr_style: str = "constant"
    start_weight_decay: Any = None
    end_weight_decay: Any = None
    lr_decay_style: str = "linear"
    lr_decay_iters: Any = None
    lr_decay_samples: Any = None
    lr_warmup_iters: Any = None
    lr_warmup_samples: Any = None
    lr_warmup_fraction: Any = None
    min_lr: int = 0
    consumed_samples: Any = None
    no_wd_decay_cond: Any = None
    scale_lr_cond: Any = None
    lr_mult: float = 1.0
    megatron_dataset_flag: bool = False
    seq_length: Any = None
    encoder_seq_length: Any = None
    decoder_seq_length: Any = None
    tensorboard_dir: Any = None
    set_all_logging_options: bool = False
    eval_iters: int = 100
    eval_interval: int = 1000
    return_logits: bool = False
    custom_train_step_class: Any = None
    custom_train_step_kwargs: Any = None
    custom_model_provider_function: Any = None
    custom_prepare_model_function: Any = None
    custom_megatron_datasets_provider_function: Any = None
    custom_get_batch_function: Any = None
    custom_loss_function: Any = None
    other_megatron_args: Any = None

    @_megatron
    def set_network_size_args(self, model: Any, batch_data: Any = None) -> Any: ...

    @_megatron
    def set_mixed_precision(self, mixed_precision: str) -> Any: ...

    @_megatron
    def set_training_args(self, micro_batch_size: int, dp_degree: int) -> Any: ...

    @_megatron
    def set_optimizer_type(self, optimizer: Any) -> Any: ...

    @_megatron
    def set_scheduler_args(self, scheduler: Any) -> Any: ...

    @_megatron
    def set_tensorboard_logging_options(self) -> Any: ...
