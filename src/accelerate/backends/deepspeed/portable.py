"""Loading a DeepSpeed checkpoint into an engine of another layout (world size, ZeRO stage 0-3,
precision, BF16_Optimizer or not, optimizer on the CPU or not), and the shape check that runs before
any DeepSpeed load touches the engine.

DeepSpeed's own ``load_checkpoint`` reads each rank's partition file, so it needs the layout that
wrote them. Here the partitions are put back together into whole tensors per parameter
(``zero_files.read_partitioned_state``: master weights and every optimizer moment; stage 0's come
from its model-states file, ``stage0.py``) and each rank writes its own share of them into the live
engine: ZeRO 1-3 and BF16_Optimizer engines through DeepSpeed's public setters
(``safe_set_full_fp32_param`` / ``safe_set_full_optimizer_state``), which know the engine's
partitioning (and its CPU-offloaded masters); stage-0 engines, which hold every tensor whole, directly.
The model's working copy, the optimizer's step and hyperparameters, the scheduler and the engine's
counters follow. Every rank reads the whole checkpoint (it is not split by rank): the cost is one full
copy of the model and its optimizer state in host memory per process. What cannot be written (an
NVMe-swapped optimizer, an optimizer whose masters live elsewhere) is refused before the engine changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from accelerate.backends.deepspeed.stage0 import stage0_slots
from accelerate.backends.deepspeed.zero_files import (
    FP32_KEY,
    PartitionedState,
    ZeroFolder,
    read_partitioned_state,
    saved_param_shapes,
    whole_weights,
)
from accelerate.storage.errors import CheckpointError

__all__ = ["check_engine_shapes", "load_portable", "saved_shapes", "tag_folder"]


def _engine_shapes(engine: Any) -> dict[str, torch.Size]:
    """Every parameter's full shape (ZeRO-3 keeps it in ``ds_shape``; the tensor itself is empty)."""
    return {name: torch.Size(getattr(p, "ds_shape", p.shape)) for name, p in engine.module.named_parameters()}


def saved_shapes(folder: ZeroFolder) -> dict[str, torch.Size]:
    """The parameter shapes a tag folder was saved with (from its model-states file)."""
    return _shapes_of(folder.load(folder.model_states_file()))


def _shapes_of(model_states: Mapping[str, Any]) -> dict[str, torch.Size]:
    shapes = saved_param_shapes(model_states)
    if shapes or model_states.get("optimizer") is None:
        return shapes
    buffers = set(
        model_states.get("buffer_names") or []
    )  # stage 0 records no param_shapes: its module has them
    return {n: v.shape for n, v in (model_states.get("module") or {}).items() if n not in buffers}


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


def _partitions(zero_optimizer: Any, stage: int) -> tuple[list[torch.Tensor], list[list[Any]] | None]:
    """The fp32 master partitions the inner optimizer steps, and (ZeRO 1/2) the parameter groups they hold.

    ZeRO-3 keeps one flat partition per sub-group; ZeRO 1/2 one per parameter group, in
    ``single_partition_of_fp32_groups`` (on the CPU when the optimizer is offloaded), and DeepSpeed's
    separate BF16_Optimizer in ``fp32_groups_flat_partition``.
    """
    if getattr(zero_optimizer, "swap_optimizer", False):
        raise CheckpointError(
            "This DeepSpeed engine offloads its optimizer state to NVMe, where it is swapped out of memory, and a "
            "checkpoint of another layout cannot be written into it. Nothing was loaded. Load a checkpoint of the "
            "same layout, or offload to the CPU (offload_optimizer.device: cpu) or not at all."
        )
    if stage == 3:
        masters = getattr(zero_optimizer, "fp32_partitioned_groups_flat", None)
        if masters is None:
            raise _unknown(zero_optimizer)
        return list(masters), None
    for masters_name, groups_name in (
        ("fp32_groups_flat_partition", "bf16_groups"),
        ("single_partition_of_fp32_groups", "bit16_groups"),
    ):
        masters = getattr(zero_optimizer, masters_name, None)
        if masters is not None:
            return list(masters), list(getattr(zero_optimizer, groups_name))
    raise _unknown(zero_optimizer)


def _unknown(zero_optimizer: Any) -> CheckpointError:
    return CheckpointError(
        f"This DeepSpeed optimizer ({type(zero_optimizer).__name__}) keeps its fp32 master weights where this "
        "loader does not look (ZeRO 1-3 optimizers, BF16_Optimizer and the stage-0 optimizers can take a "
        "checkpoint of another layout). Nothing was loaded. Load a checkpoint of the same layout."
    )


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
            state[key] = _scalar_for(inner, value)


def _scalar_for(inner: torch.optim.Optimizer, value: Any) -> Any:
    """A scalar of the optimizer state (Adam's step) in the form the stepping optimizer keeps it.

    torch's optimizers keep a tensor (and refuse a number); DeepSpeedCPUAdam, which steps an offloaded
    optimizer, keeps an int that it hands to its C++ kernel.
    """
    if type(inner).__module__.startswith("torch.optim"):
        return value.clone() if torch.is_tensor(value) else torch.tensor(float(value))
    if torch.is_tensor(value) and value.numel() == 1:
        number = value.item()
        return int(number) if float(number).is_integer() else number
    return value


class _PartitionedWriter:
    """Writes whole tensors into a ZeRO 1-3 engine (or BF16_Optimizer) through DeepSpeed's setters."""

    def __init__(self, zero_optimizer: Any, stage: int) -> None:
        self.masters, self.groups = _partitions(zero_optimizer, stage)
        self.zero_optimizer = zero_optimizer
        self.inner: torch.optim.Optimizer = zero_optimizer.optimizer

    def prepare(self, saved: PartitionedState) -> None:
        _create_state(self.inner, self.masters, saved)
        if self.groups is None:
            return
        # ZeRO 1/2 parameters find their optimizer-state slices through links made after a step: make them
        from deepspeed.utils.mixed_precision_linkage import lazy_init_hp_params_optimizer_state

        for group, master in zip(self.groups, self.masters, strict=True):
            lazy_init_hp_params_optimizer_state(group, master, self.inner.state)
        if hasattr(self.zero_optimizer, "_hp_optimizer_states_linked"):
            self.zero_optimizer._hp_optimizer_states_linked = (
                True  # BF16_Optimizer: linked now, not at its step
            )

    def write(self, param: torch.nn.Parameter, values: Mapping[str, torch.Tensor]) -> None:
        from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

        device = self.masters[0].device
        for key, value in values.items():
            if key == FP32_KEY:
                safe_set_full_fp32_param(param, value.to(device))
            else:
                safe_set_full_optimizer_state(param, value.to(device), key)


class _Stage0Writer:
    """Writes whole tensors into a ZeRO stage-0 engine, whose every rank holds all of them."""

    def __init__(self, optimizer: Any) -> None:
        self.inner, self.slots = stage0_slots(optimizer)

    def prepare(self, saved: PartitionedState) -> None:
        _create_state(self.inner, list({id(s.master): s.master for s in self.slots.values()}.values()), saved)

    def write(self, param: torch.nn.Parameter, values: Mapping[str, torch.Tensor]) -> None:
        slot = self.slots.get(id(param))
        if slot is None:
            return  # frozen: the optimizer does not hold it
        for key, value in values.items():
            target = slot.master.data if key == FP32_KEY else self.inner.state[slot.master][key]
            slot.view(target, value.numel()).copy_(value.reshape(-1).to(target.dtype))


def _set_working_copy(param: torch.nn.Parameter, value: torch.Tensor) -> None:
    if hasattr(param, "ds_id"):  # ZeRO-3: gather, write, and let DeepSpeed re-partition on exit
        from accelerate.backends.deepspeed.gathered import GatheredParameters

        with GatheredParameters([param], modifier_rank=0):
            param.data.copy_(value.to(param.dtype))
    else:
        param.data.copy_(value.to(device=param.device, dtype=param.dtype))


def load_portable(engine: Any, folder: ZeroFolder, *, index: int) -> None:
    """Loads a DeepSpeed checkpoint of any world size, ZeRO stage 0-3, precision (fp32, bf16 with the ZeRO
    optimizer or BF16_Optimizer) and optimizer offload (none or CPU) into ``engine`` (on every rank)."""
    saved = read_partitioned_state(folder)
    check_engine_shapes(engine, _shapes_of(saved.model_states), source=str(folder.path), index=index)
    stage = int(engine.zero_optimization_stage())
    try:
        writer = (
            _Stage0Writer(engine.optimizer) if stage == 0 else _PartitionedWriter(engine.optimizer, stage)
        )
    except CheckpointError as error:
        from accelerate.backends.deepspeed.checkpoint_io import engine_layout

        raise CheckpointError(
            f"{folder.path} (a {saved.kind} checkpoint saved by {saved.world_size} process(es)) cannot be loaded "
            f"into DeepSpeed engine {index} (ZeRO-{stage}, {engine_layout(engine)}): {error}"
        ) from error
    if len(writer.inner.param_groups) != len(saved.param_groups):
        raise CheckpointError(
            f"{folder.path} has {len(saved.param_groups)} optimizer parameter groups and engine {index}'s "
            f"optimizer has {len(writer.inner.param_groups)}; build the optimizer with the same groups. Nothing "
            "was loaded."
        )
    weights = whole_weights(folder, saved)
    writer.prepare(saved)
    for name, param in engine.module.named_parameters():
        _set_working_copy(param, weights[name])
        if name in saved.params:  # frozen: no master copy, no optimizer state
            writer.write(param, saved.params[name])
    _restore_buffers(engine, weights)
    for group, hyper in zip(writer.inner.param_groups, saved.param_groups, strict=True):
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
