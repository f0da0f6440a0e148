"""Loading a ZeRO checkpoint into an engine of another world size or ZeRO stage, and the shape check
that runs before any DeepSpeed load touches the engine.

DeepSpeed's own ``load_checkpoint`` reads each rank's partition file, so it needs the world size and
stage that wrote them. Here the partitions are put back together into whole tensors per parameter
(``zero_files.read_partitioned_state``: master weights and every optimizer moment) and each rank
writes its own share of them into the live engine through DeepSpeed's public setters
(``safe_set_full_fp32_param`` / ``safe_set_full_optimizer_state``), which know the engine's
partitioning. The model's working copy, the optimizer's step and hyperparameters, the scheduler and
the engine's counters follow. Every rank reads the whole checkpoint (it is not split by rank): the
cost is one full copy of the model and its optimizer state in host memory per process.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from accelerate.backends.deepspeed.zero_files import (
    FP32_KEY,
    PartitionedState,
    ZeroFolder,
    full_fp32_weights,
    read_partitioned_state,
    saved_param_shapes,
)
from accelerate.storage.errors import CheckpointError

__all__ = ["check_engine_shapes", "load_portable", "saved_shapes", "tag_folder"]


def _engine_shapes(engine: Any) -> dict[str, torch.Size]:
    """Every parameter's full shape (ZeRO-3 keeps it in ``ds_shape``; the tensor itself is empty)."""
    return {name: torch.Size(getattr(p, "ds_shape", p.shape)) for name, p in engine.module.named_parameters()}


def saved_shapes(folder: ZeroFolder) -> dict[str, torch.Size]:
    """The parameter shapes a tag folder was saved with (from its model-states file)."""
    return saved_param_shapes(folder.load(folder.model_states_file()))


def check_engine_shapes(engine: Any, saved: Mapping[str, torch.Size], *, source: str, index: int) -> None:
    """Refuses, before anything is loaded, a checkpoint whose parameters differ from the engine's.

    DeepSpeed's ``load_checkpoint`` copies the module first and fails on the optimizer partitions
    afterwards, leaving the engine half loaded; this check names the first mismatch instead.
    """
    now = _engine_shapes(engine)
    for name, shape in now.items():
        if name in saved and saved[name] != shape:
            raise CheckpointError(
                f"{source} does not fit DeepSpeed engine {index}: parameter {name!r} was saved with shape "
                f"{tuple(saved[name])} and the model has {tuple(shape)}. Nothing was loaded. Build the model "
                "with the configuration it was saved with."
            )
    missing = sorted(set(now) - set(saved))
    extra = sorted(set(saved) - set(now))
    if missing or extra:
        raise CheckpointError(
            f"{source} does not fit DeepSpeed engine {index}: "
            + "; ".join(
                part
                for part in (
                    f"the model has parameters the checkpoint lacks: {missing[:5]}" if missing else "",
                    f"the checkpoint has parameters the model lacks: {extra[:5]}" if extra else "",
                )
                if part
            )
            + ". Nothing was loaded."
        )


def _flat_masters(zero_optimizer: Any, stage: int) -> list[torch.Tensor]:
    """The fp32 master tensors the inner optimizer steps (one per parameter group or ZeRO-3 sub-group)."""
    name = "fp32_partitioned_groups_flat" if stage == 3 else "single_partition_of_fp32_groups"
    masters = getattr(zero_optimizer, name, None)
    if masters is None:
        raise CheckpointError(
            f"This DeepSpeed optimizer ({type(zero_optimizer).__name__}) keeps no {name}: only the ZeRO 1-3 "
            "optimizers without bf16_optimizer or offloading can take a checkpoint of another layout."
        )
    return list(masters)


def _create_state(inner: torch.optim.Optimizer, masters: list[torch.Tensor], saved: PartitionedState) -> None:
    """The inner optimizer's state for every master tensor, shaped and ready to be filled.

    A fresh engine has none yet (torch's optimizers create it on their first step), and DeepSpeed's
    setters write into existing state only.
    """
    keys = sorted({key for values in saved.params.values() for key in values if key != FP32_KEY})
    scalars = saved.group_scalars[0] if saved.group_scalars else {}
    for master in masters:
        state = inner.state[master]
        for key in keys:
            state[key] = torch.zeros_like(master)
        for key, value in scalars.items():
            state[key] = value.clone() if torch.is_tensor(value) else value


def _link_fragments(zero_optimizer: Any, inner: torch.optim.Optimizer, stage: int) -> None:
    """ZeRO 1/2 parameters find their optimizer-state slices through links made after a step: make them."""
    if stage == 3:
        return
    from deepspeed.utils.mixed_precision_linkage import lazy_init_hp_params_optimizer_state

    for group, master in zip(
        zero_optimizer.bit16_groups, zero_optimizer.single_partition_of_fp32_groups, strict=True
    ):
        lazy_init_hp_params_optimizer_state(group, master, inner.state)


def _set_working_copy(param: torch.nn.Parameter, value: torch.Tensor) -> None:
    if hasattr(param, "ds_id"):  # ZeRO-3: gather, write, and let DeepSpeed re-partition on exit
        from accelerate.backends.deepspeed.gathered import GatheredParameters

        with GatheredParameters([param], modifier_rank=0):
            param.data.copy_(value.to(param.dtype))
    else:
        param.data.copy_(value.to(device=param.device, dtype=param.dtype))


def load_portable(engine: Any, folder: ZeroFolder, *, index: int) -> None:
    """Loads a ZeRO checkpoint of any world size and stage 1-3 into ``engine`` (on every rank)."""
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

    saved = read_partitioned_state(folder)
    check_engine_shapes(engine, saved_param_shapes(saved.model_states), source=str(folder.path), index=index)
    weights = full_fp32_weights(folder)
    stage = int(engine.zero_optimization_stage())
    zero_optimizer = engine.optimizer
    inner = zero_optimizer.optimizer
    if len(inner.param_groups) != len(saved.param_groups):
        raise CheckpointError(
            f"{folder.path} has {len(saved.param_groups)} optimizer parameter groups and engine {index}'s "
            f"optimizer has {len(inner.param_groups)}; build the optimizer with the same groups."
        )
    _create_state(inner, _flat_masters(zero_optimizer, stage), saved)
    _link_fragments(zero_optimizer, inner, stage)
    device = next(iter(_flat_masters(zero_optimizer, stage))).device
    for name, param in engine.module.named_parameters():
        _set_working_copy(param, weights[name])
        if name not in saved.params:
            continue  # frozen: no master copy, no optimizer state
        for key, value in saved.params[name].items():
            value = value.to(device)
            if key == FP32_KEY:
                safe_set_full_fp32_param(param, value)
            else:
                safe_set_full_optimizer_state(param, value, key)
    _restore_buffers(engine, weights)
    for group, hyper in zip(inner.param_groups, saved.param_groups, strict=True):
        group.update(hyper)
    _restore_engine(engine, saved.model_states)


def _restore_buffers(engine: Any, weights: Mapping[str, torch.Tensor]) -> None:
    for name, buffer in engine.module.named_buffers():
        if name in weights:
            buffer.data.copy_(weights[name].to(device=buffer.device, dtype=buffer.dtype))


def _restore_engine(engine: Any, model_states: Mapping[str, Any]) -> None:
    scheduler_state = model_states.get("lr_scheduler")
    if engine.lr_scheduler is not None and scheduler_state is not None:
        engine.lr_scheduler.load_state_dict(scheduler_state)
    for key in ("global_steps", "global_samples", "skipped_steps"):
        if key in model_states:
            setattr(engine, key, model_states[key])


def tag_folder(directory: Path, tag: str, records: Mapping[str, Any] | None) -> ZeroFolder:
    return ZeroFolder(directory / tag, records or {}, directory)
