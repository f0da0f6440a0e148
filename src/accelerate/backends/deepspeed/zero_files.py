"""Reading a DeepSpeed ZeRO checkpoint in one process, without a process group or an engine.

A ZeRO checkpoint's tag folder (``pytorch_model/``) holds one ``*optim_states.pt`` file per rank,
each with that rank's partition of the fp32 master weights and of the optimizer state (Adam's
moments), and one or more ``*model_states.pt`` files with the parameter shapes, the scheduler and
the engine's counters. This module puts the partitions back together into whole tensors per
parameter, which is what moving the state to another world size or ZeRO stage, or merging it into
one weights file, needs. The full weights come from DeepSpeed's own ``zero_to_fp32`` helper.

How the partitions are laid out (what the reassembly relies on):

* ZeRO 1 and 2: the trainable parameters of a group are flattened one after the other and the flat
  vector is cut into one equal slice per rank (the last padded); each rank saves its slice of the
  master weights (padding removed) and of each moment (padding kept).
* ZeRO 3: every parameter is cut into one slice per rank (``ceil(numel / world)`` elements, the last
  padded); each rank saves its slices of all parameters one after the other.

DeepSpeed's files are pickles: read only checkpoints you trust. Inside a checkpoint of ours every
file is checked against the manifest before it is read.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from accelerate.storage.durable_io import FileRecord
from accelerate.storage.errors import CheckpointError
from accelerate.storage.regular_files import open_regular
from accelerate.storage.verified_read import load_verified, verify_file

__all__ = [
    "FP32_KEY",
    "PartitionedState",
    "ZeroFolder",
    "full_fp32_weights",
    "read_partitioned_state",
    "whole_weights",
]

FP32_KEY = "fp32"  # the master weights, beside the optimizer's own keys (exp_avg, exp_avg_sq, ...)
_OPTIM_FILE = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt")


@dataclass(frozen=True)
class ZeroFolder:
    """One engine's tag folder and the manifest records of its files (empty: read unverified)."""

    path: Path
    records: Mapping[str, FileRecord] = field(default_factory=dict)  # by name relative to root
    root: Path | None = None

    def _record(self, file: Path) -> FileRecord | None:
        if self.root is None:
            return None
        return self.records.get(file.relative_to(self.root).as_posix())

    def load(self, file: Path) -> Any:
        """A DeepSpeed file's contents (a pickle), verified against its record first."""

        def read(path: Path) -> Any:
            with open_regular(path) as handle:
                data = handle.read()
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)

        return load_verified(file, self._record(file), read)

    def verify_all(self) -> None:
        """Checks every file of the folder the manifest lists (DeepSpeed's own reader reads them after)."""
        for file in sorted(self.path.iterdir()):
            record = self._record(file)
            if record is not None:
                verify_file(file, record)

    def optim_files(self) -> list[Path]:
        """The per-rank optimizer files, in rank order; refuses a gap or a model-parallel checkpoint."""
        found: dict[int, Path] = {}
        for file in self.path.iterdir():
            match = _OPTIM_FILE.fullmatch(file.name)
            if match is None:
                continue
            if int(match.group(2)) != 0:
                raise CheckpointError(
                    f"{self.path} holds a model-parallel DeepSpeed checkpoint ({file.name}); only data-parallel "
                    "ZeRO checkpoints (mp_rank_00) can be converted."
                )
            found[int(match.group(1))] = file
        if not found:
            raise CheckpointError(f"{self.path} has no DeepSpeed optimizer files (*_optim_states.pt).")
        if sorted(found) != list(range(len(found))):
            raise CheckpointError(
                f"{self.path} has optimizer files for ranks {sorted(found)}: some are missing, so the "
                "partitions cannot be put back together."
            )
        return [found[rank] for rank in range(len(found))]

    def model_states_file(self) -> Path:
        files = sorted(self.path.glob("*model_states.pt"))
        if not files:
            raise CheckpointError(f"{self.path} has no DeepSpeed model-states file (*model_states.pt).")
        return files[0]  # mp_rank_00_... (ZeRO 0-2) or rank 0's zero_pp_rank_0_... (ZeRO 3)


def is_zero_folder(path: Path) -> bool:
    """Whether ``path`` looks like a DeepSpeed tag folder (its per-rank files)."""
    return path.is_dir() and any(path.glob("*_optim_states.pt")) and any(path.glob("*model_states.pt"))


@dataclass
class PartitionedState:
    """Whole tensors per trainable parameter, put back together from every rank's partition."""

    stage: int
    world_size: int
    # name -> {"fp32": master weight, "exp_avg": ..., ...}, in the saved shape
    params: dict[str, dict[str, torch.Tensor]]
    # per parameter group: its hyperparameters (lr, betas, ...) and its scalar state (Adam's step)
    param_groups: list[dict[str, Any]]
    group_scalars: list[dict[str, Any]]
    model_states: dict[str, Any]  # rank 0's model-states file: param_shapes, lr_scheduler, counters
    # what wrote it: "ZeRO-<stage>", "BF16_Optimizer" (ZeRO-1's layout without a stage) or "ZeRO-0"
    kind: str = "ZeRO"

    def shapes(self) -> dict[str, torch.Size]:
        return {name: values[FP32_KEY].shape for name, values in self.params.items()}


def saved_param_shapes(model_states: Mapping[str, Any]) -> dict[str, torch.Size]:
    """Every parameter's saved shape (trainable and frozen), from a model-states file."""
    shapes: dict[str, torch.Size] = {}
    for group in model_states.get("param_shapes") or []:
        shapes.update({name: torch.Size(shape) for name, shape in group.items()})
    shapes.update(
        {name: torch.Size(s) for name, s in (model_states.get("frozen_param_shapes") or {}).items()}
    )
    return shapes


def _stage(optim: Mapping[str, Any], folder: Path) -> int:
    stage = optim.get("zero_stage")
    if stage is None:
        if "single_partition_of_fp32_groups" in optim:
            return 1  # DeepSpeed's BF16_Optimizer: ZeRO-1's layout (its masters keep their padding)
        raise CheckpointError(
            f"{folder}: the optimizer files name no ZeRO stage and are not BF16_Optimizer's; they cannot be "
            "converted. Load the checkpoint with the setup that saved it."
        )
    return int(stage)


def _split_by_shape(flat: torch.Tensor, shapes: Mapping[str, torch.Size], out: dict[str, dict[str, torch.Tensor]], key: str) -> int:  # fmt: skip
    offset = 0
    for name, shape in shapes.items():
        numel = shape.numel()
        out.setdefault(name, {})[key] = flat.narrow(0, offset, numel).view(shape).clone()
        offset += numel
    return offset


def _per_element(value: Any, size: int) -> bool:
    return torch.is_tensor(value) and value.dim() == 1 and value.numel() >= size


def _zero12(ranks: list[dict[str, Any]], shapes: list[dict[str, torch.Size]], folder: Path) -> tuple[dict[str, dict[str, torch.Tensor]], list[dict[str, Any]]]:  # fmt: skip
    params: dict[str, dict[str, torch.Tensor]] = {}
    scalars: list[dict[str, Any]] = []
    for group, group_shapes in enumerate(shapes):
        pieces: dict[str, list[torch.Tensor]] = {}
        scalar: dict[str, Any] = {}
        for optim in ranks:
            fp32 = optim["single_partition_of_fp32_groups"][group]
            size = fp32.numel()  # the moments keep the last rank's padding; the master weights do not
            pieces.setdefault(FP32_KEY, []).append(fp32.float())
            for key, value in optim["base_optimizer_state"]["state"].get(group, {}).items():
                if _per_element(value, size):
                    pieces.setdefault(key, []).append(value.narrow(0, 0, size).float())
                else:
                    scalar.setdefault(key, value)
        for key, parts in pieces.items():
            used = _split_by_shape(torch.cat(parts), group_shapes, params, key)
            available = sum(p.numel() for p in parts)
            if used > available:
                raise CheckpointError(
                    f"{folder}: parameter group {group} needs {used} elements and the partitions hold "
                    f"{available}; the files do not belong together."
                )
        scalars.append(scalar)
    return params, scalars


def _zero3(ranks: list[dict[str, Any]], shapes: list[dict[str, torch.Size]], folder: Path) -> tuple[dict[str, dict[str, torch.Tensor]], list[dict[str, Any]]]:  # fmt: skip
    world = len(ranks)
    merged = {name: shape for group in shapes for name, shape in group.items()}
    per_rank: list[dict[str, torch.Tensor]] = []
    for optim in ranks:
        flat_groups = optim["fp32_flat_groups"]
        state = optim["optimizer_state_dict"]["state"]
        keyed: dict[str, list[torch.Tensor]] = {FP32_KEY: [g.float() for g in flat_groups]}
        for sub_group, flat in enumerate(flat_groups):
            for key, value in state.get(sub_group, {}).items():
                if _per_element(value, flat.numel()):
                    keyed.setdefault(key, []).append(value.narrow(0, 0, flat.numel()).float())
        per_rank.append({key: torch.cat(parts) for key, parts in keyed.items()})
    first = ranks[0]["optimizer_state_dict"]["state"]
    scalars = [
        {k: v for k, v in first.get(sub_group, {}).items() if not _per_element(v, flat.numel())}
        for sub_group, flat in enumerate(ranks[0]["fp32_flat_groups"])
    ]
    params: dict[str, dict[str, torch.Tensor]] = {}
    for key in per_rank[0]:
        offset = 0
        for name, shape in merged.items():
            part = math.ceil(shape.numel() / world)
            if offset + part > per_rank[0][key].numel():
                raise CheckpointError(f"{folder}: the ZeRO-3 partitions end before parameter {name!r}.")
            whole = torch.cat([rank[key].narrow(0, offset, part) for rank in per_rank])
            params.setdefault(name, {})[key] = whole.narrow(0, 0, shape.numel()).view(shape).clone()
            offset += part
    return params, scalars


def read_partitioned_state(folder: ZeroFolder) -> PartitionedState:
    """Every trainable parameter's master weight and optimizer state, whole, from all ranks' files."""
    model_states = folder.load(folder.model_states_file())
    if model_states.get("optimizer") is not None and not any(folder.path.glob("*_optim_states.pt")):
        from accelerate.backends.deepspeed.stage0 import read_stage0  # stage 0: all in the model states

        params0, groups0, scalars0 = read_stage0(model_states, str(folder.path))
        world = int(model_states.get("dp_world_size") or 1)
        return PartitionedState(0, world, params0, groups0, scalars0, model_states, kind="ZeRO-0")
    files = folder.optim_files()
    ranks = [folder.load(f)["optimizer_state_dict"] for f in files]
    stage = _stage(ranks[0], folder.path)
    shapes = [
        {name: torch.Size(shape) for name, shape in group.items()}
        for group in model_states.get("param_shapes") or []
    ]
    if stage in (1, 2):
        partitions = ranks[0].get("partition_count")
        if partitions is not None and any(int(c) != len(files) for c in partitions):
            raise CheckpointError(
                f"{folder.path}: the optimizer state is partitioned over {partitions} ranks and there are "
                f"{len(files)} optimizer files."
            )
        params, scalars = _zero12(ranks, shapes, folder.path)
        base = ranks[0]["base_optimizer_state"]
    elif stage == 3:
        params, scalars = _zero3(ranks, shapes, folder.path)
        base = ranks[0]["optimizer_state_dict"]
    else:
        raise CheckpointError(
            f"{folder.path}: ZeRO stage {stage} checkpoints cannot be converted (1, 2 or 3 can)."
        )
    groups = [{k: v for k, v in group.items() if k != "params"} for group in base.get("param_groups", [])]
    kind = f"ZeRO-{stage}" if "zero_stage" in ranks[0] else "BF16_Optimizer"
    return PartitionedState(stage, len(files), params, groups, scalars, model_states, kind)


def whole_weights(folder: ZeroFolder, saved: PartitionedState) -> dict[str, torch.Tensor]:
    """The whole model in fp32: DeepSpeed's ``zero_to_fp32`` for ZeRO 1-3 files; for stage 0 and
    BF16_Optimizer (which that helper does not read) the saved module with its fp32 masters put in."""
    if saved.kind.startswith("ZeRO-") and saved.stage > 0:
        return full_fp32_weights(folder)
    module = saved.model_states.get("module") or {}
    weights = {name: value.detach().float().cpu() for name, value in module.items()}
    weights.update({name: values[FP32_KEY] for name, values in saved.params.items()})
    return weights


def full_fp32_weights(folder: ZeroFolder) -> dict[str, torch.Tensor]:
    """The whole model in fp32 (trainable, frozen and buffers), by DeepSpeed's ``zero_to_fp32`` helper."""
    from accelerate.backends.deepspeed.runtime import import_deepspeed

    import_deepspeed()
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    folder.verify_all()
    state = get_fp32_state_dict_from_zero_checkpoint(str(folder.path.parent), tag=folder.path.name)
    return {name: value.detach().cpu() for name, value in state.items()}
