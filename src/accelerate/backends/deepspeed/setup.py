"""Completing a DeepSpeed config at ``prepare`` and building the engine with ``deepspeed.initialize``.

At ``prepare`` the Accelerator knows what a config's ``"auto"`` values stand for: the micro-batch
size (the prepared dataloader's), the accumulation steps, the world size, the optimizer's and
scheduler's hyper-parameters and the model's hidden size. :func:`complete_config` fills them and
refuses a concrete value that contradicts them (naming both) or an ``"auto"`` nothing answers
(naming the key and how to set it).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any

import torch

from accelerate.backends.deepspeed.config import Known, fill_auto, remaining_auto
from accelerate.backends.deepspeed.runtime import import_deepspeed
from accelerate.backends.deepspeed.wrappers import DummyOptim, DummyScheduler

# How to set each "auto" key that prepare() could not fill.
_HOW_TO_SET = {
    "train_micro_batch_size_per_gpu": "prepare a DataLoader with the model, or set it in the config",
    "train_batch_size": "prepare a DataLoader with the model, or set it in the config",
    "optimizer.params.lr": "pass an optimizer (or DummyOptim(lr=...)) to prepare, or set it in the config",
    "scheduler.params.total_num_steps": "pass DummyScheduler(optimizer, total_num_steps=...) to prepare, or set it in the config",
    "scheduler.params.warmup_num_steps": "pass DummyScheduler(optimizer, warmup_num_steps=...) to prepare, or set it in the config",
    "zero_optimization.reduce_bucket_size": "set it in the config (a model with config.hidden_size fills it)",
    "zero_optimization.stage3_prefetch_bucket_size": "set it in the config (a model with config.hidden_size fills it)",
    "zero_optimization.stage3_param_persistence_threshold": "set it in the config (a model with config.hidden_size fills it)",
}


@dataclass
class PrepareFacts:
    """What the Accelerator knows at ``prepare`` (None: not known)."""

    micro_batch_size: int | None
    gradient_accumulation_steps: int
    num_processes: int
    model: torch.nn.Module | None
    optimizer: Any
    scheduler: Any


def _hidden_size(model: torch.nn.Module | None) -> int | None:
    config = getattr(model, "config", None)
    size = getattr(config, "hidden_size", None)
    sizes = getattr(config, "hidden_sizes", None)
    if size is None and isinstance(sizes, list | tuple) and sizes:
        size = max(sizes)
    return int(size) if isinstance(size, int) else None


def _optimizer_facts(optimizer: Any) -> dict[str, Known]:
    if isinstance(optimizer, DummyOptim):
        values: dict[str, Any] = {
            "lr": optimizer.lr,
            "weight_decay": optimizer.weight_decay,
            **optimizer.kwargs,
        }
        source = "DummyOptim(...)"
    elif isinstance(optimizer, torch.optim.Optimizer):
        values = dict(optimizer.defaults)
        source = f"the {type(optimizer).__name__} passed to prepare"
    else:
        return {}
    known = {
        f"optimizer.params.{k}": Known(v, source, must_match=False)
        for k, v in values.items()
        if k in ("lr", "weight_decay", "eps")
    }
    if "betas" in values:
        known["optimizer.params.betas"] = Known(list(values["betas"]), source, must_match=False)
    return known


def _scheduler_facts(scheduler: Any, optimizer: Any) -> dict[str, Known]:
    known: dict[str, Known] = {}
    lr = getattr(optimizer, "lr", None) or (
        optimizer.defaults.get("lr") if isinstance(optimizer, torch.optim.Optimizer) else None
    )
    if lr is not None:
        known["scheduler.params.warmup_max_lr"] = Known(lr, "the optimizer's lr", must_match=False)
        known["scheduler.params.cos_min_ratio"] = Known(0.0, "the default", must_match=False)
    known["scheduler.params.warmup_min_lr"] = Known(0.0, "the default", must_match=False)
    if isinstance(scheduler, DummyScheduler):
        if scheduler.total_num_steps is not None:
            known["scheduler.params.total_num_steps"] = Known(
                scheduler.total_num_steps, "DummyScheduler(total_num_steps=...)", must_match=False
            )
        known["scheduler.params.warmup_num_steps"] = Known(
            scheduler.warmup_num_steps, "DummyScheduler(warmup_num_steps=...)", must_match=False
        )
    return known


def complete_config(config: dict[str, Any], facts: PrepareFacts) -> dict[str, Any]:
    """A copy of ``config`` with every "auto" filled from ``facts``; raises on contradictions and leftovers."""
    config = copy.deepcopy(config)
    if facts.optimizer is None:
        # A model prepared without an optimizer (evaluation, a frozen teacher) gets an engine without one.
        config.pop("optimizer", None)
        config.pop("scheduler", None)
        zero = config.get("zero_optimization") or {}
        if zero.get("stage") in (1, 2):  # they shard optimizer state and gradients: none here
            zero["stage"] = 0
    elif isinstance(facts.optimizer, torch.optim.Optimizer):
        # ZeRO runs any torch optimizer elementwise on its partition; DeepSpeed only vouches for its own.
        config.setdefault("zero_allow_untested_optimizer", True)
    known: dict[str, Known] = {
        "gradient_accumulation_steps": Known(facts.gradient_accumulation_steps, "the Accelerator's gradient_accumulation_steps"),
        # upstream's default for "auto": DeepSpeed clips at 1.0 unless told otherwise
        "gradient_clipping": Known(1.0, "the default", must_match=False),
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": Known(False, "the default", must_match=False),
    }  # fmt: skip
    if facts.micro_batch_size is not None:
        known["train_micro_batch_size_per_gpu"] = Known(
            facts.micro_batch_size, "the prepared DataLoader's batch size per process"
        )
        total = facts.micro_batch_size * facts.gradient_accumulation_steps * facts.num_processes
        known["train_batch_size"] = Known(
            total,
            "batch size per process x gradient_accumulation_steps x num_processes of the prepared DataLoader",
        )
    hidden = _hidden_size(facts.model)
    if hidden is not None:
        known["zero_optimization.reduce_bucket_size"] = Known(
            hidden * hidden, "the model's hidden_size", must_match=False
        )
        known["zero_optimization.stage3_prefetch_bucket_size"] = Known(
            int(0.9 * hidden * hidden), "the model's hidden_size", must_match=False
        )
        known["zero_optimization.stage3_param_persistence_threshold"] = Known(
            10 * hidden, "the model's hidden_size", must_match=False
        )
    known.update(_optimizer_facts(facts.optimizer))
    known.update(_scheduler_facts(facts.scheduler, facts.optimizer))
    mismatches = fill_auto(config, known, origin="the DeepSpeed config")
    if mismatches:
        raise ValueError(
            "The DeepSpeed config contradicts the Accelerator:\n- "
            + "\n- ".join(mismatches)
            + '\nChange one of them, or set the config value to "auto" so that prepare() fills it.'
        )
    if facts.micro_batch_size is None and "train_micro_batch_size_per_gpu" in remaining_auto(config):
        # A model prepared without a DataLoader (inference, or a loader prepared later) still needs one:
        # DeepSpeed checks the batch arithmetic even when it never trains.
        fill_auto(config, {"train_micro_batch_size_per_gpu": Known(1, "a placeholder")}, origin="")
        total = facts.gradient_accumulation_steps * facts.num_processes
        fill_auto(config, {"train_batch_size": Known(total, "a placeholder")}, origin="")
    left = remaining_auto(config)
    if left:
        lines = [f'{key}: "auto" ({_HOW_TO_SET.get(key, "set it in the config")})' for key in left]
        raise ValueError("prepare() cannot fill these DeepSpeed config values:\n- " + "\n- ".join(lines))
    return config


def check_optimizer_source(config: dict[str, Any], optimizer: Any, scheduler: Any) -> None:
    """Exactly one side defines the optimizer (and the scheduler): the code or the config file."""
    if "optimizer" in config and optimizer is not None and not isinstance(optimizer, DummyOptim):
        raise ValueError(
            f"The DeepSpeed config defines an optimizer and prepare() got a {type(optimizer).__name__}; define it "
            'in one place: drop the config\'s "optimizer" section, or pass accelerate.utils.DummyOptim(params, lr=...).'
        )
    if isinstance(optimizer, DummyOptim) and "optimizer" not in config:
        raise ValueError(
            'prepare() got a DummyOptim, but the DeepSpeed config has no "optimizer" section for it to stand for; '
            "add one, or pass a torch optimizer."
        )
    is_dummy = isinstance(scheduler, DummyScheduler)
    if "scheduler" in config and scheduler is not None and not is_dummy:
        raise ValueError(
            f"The DeepSpeed config defines a scheduler and prepare() got a {type(scheduler).__name__}; define it in "
            'one place: drop the config\'s "scheduler" section, or pass accelerate.utils.DummyScheduler(optimizer, ...).'
        )
    if is_dummy and "scheduler" not in config and scheduler.lr_scheduler_callable is None:
        raise ValueError(
            'prepare() got a DummyScheduler, but the DeepSpeed config has no "scheduler" section and no '
            "lr_scheduler_callable was given; add one of them, or pass a torch scheduler."
        )


def ensure_process_group() -> None:
    """DeepSpeed needs torch.distributed; a single process gets a one-process gloo group."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return
    # DeepSpeed's engine insists on LOCAL_RANK, which only torchrun sets: a lone process is local rank 0.
    os.environ.setdefault("LOCAL_RANK", "0")
    from accelerate.utils.ports import get_free_port

    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{get_free_port()}", rank=0, world_size=1
    )


@dataclass
class Engine:
    """What ``deepspeed.initialize`` returned."""

    engine: Any
    optimizer: Any
    scheduler: Any


def build_engine(config: dict[str, Any], model: torch.nn.Module, optimizer: Any, scheduler: Any) -> Engine:
    """``deepspeed.initialize`` with the client optimizer/scheduler, or the config's own."""
    deepspeed = import_deepspeed()
    ensure_process_group()
    kwargs: dict[str, Any] = {"model": model, "config": config, "dist_init_required": False}
    if isinstance(optimizer, DummyOptim):
        kwargs["model_parameters"] = optimizer.params
    elif optimizer is not None:
        kwargs["optimizer"] = optimizer
    if isinstance(scheduler, DummyScheduler):
        if scheduler.lr_scheduler_callable is not None:
            kwargs["lr_scheduler"] = scheduler.lr_scheduler_callable
    elif scheduler is not None:
        kwargs["lr_scheduler"] = scheduler
    engine, ds_optimizer, _, ds_scheduler = deepspeed.initialize(**kwargs)
    return Engine(engine, ds_optimizer if optimizer is not None else None, ds_scheduler)
