"""ZeRO stage 0's optimizer state: read from a checkpoint, and written into a stage-0 engine.

A stage-0 engine is data parallel without partitioning: every rank holds the whole optimizer state,
and its checkpoint has no per-rank optimizer files. The model-states file holds it instead
(``"optimizer"``), in one of three layouts:

* fp32: the user's torch optimizer itself steps the parameters (a torch ``state_dict``, keyed by the
  parameters' positions over all groups);
* bf16, unfused (``FP16_UnfusedOptimizer``): one fp32 master per parameter (``fp32_groups``) and the
  inner optimizer's ``state_dict`` keyed by their positions;
* bf16, fused (``FP16_Optimizer``): one flat fp32 master per group (``fp32_groups_flat``), its state
  keyed by the group's position.

The parameters are not named there: they are matched, in order, with the parameters of the saved
module (``"module"``, buffers left out), which is the order DeepSpeed's wrappers and
``model.parameters()`` use. A checkpoint whose optimizer does not hold every parameter (frozen ones
left out) is refused rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from accelerate.storage.errors import CheckpointError

__all__ = ["Slot", "read_stage0", "stage0_slots"]

FP32_KEY = "fp32"
_INNER = "optimizer_state_dict"


def _split(flat: torch.Tensor, shapes: list[torch.Size]) -> list[torch.Tensor]:
    pieces, offset = [], 0
    for shape in shapes:
        pieces.append(flat.narrow(0, offset, shape.numel()).view(shape).clone())
        offset += shape.numel()
    return pieces


def read_stage0(model_states: Mapping[str, Any], where: str) -> tuple[dict[str, dict[str, torch.Tensor]], list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    """Per parameter name its fp32 master and moments; the groups' hyperparameters; their scalar state."""
    saved = model_states["optimizer"]
    buffers = set(model_states.get("buffer_names") or [])
    module = {k: v for k, v in (model_states.get("module") or {}).items() if k not in buffers}
    names = list(module)
    inner = saved.get(_INNER, saved)
    groups = inner.get("param_groups", [])
    positions = [index for group in groups for index in group["params"]]
    state = inner.get("state", {})
    if "fp32_groups_flat" in saved:  # fused: one flat master per group, its state keyed by group
        shapes = [module[n].shape for n in names]
        counts = [len(group["params"]) for group in groups]
        masters: list[torch.Tensor] = []
        moments: dict[str, list[torch.Tensor]] = {}
        start = 0
        for index, (flat, count) in enumerate(zip(saved["fp32_groups_flat"], counts, strict=True)):
            group_shapes = shapes[start : start + count]
            masters += _split(flat.float(), group_shapes)
            for key, value in state.get(index, {}).items():
                if torch.is_tensor(value) and value.numel() == flat.numel() and value.dim() == 1:
                    moments.setdefault(key, []).extend(_split(value.float(), group_shapes))
            start += count
        per_param = [{k: v[i] for k, v in moments.items()} for i in range(len(masters))]
    else:
        masters = [t.float() for group in saved.get("fp32_groups", []) for t in group]
        if not masters:  # fp32: the parameters are their own masters
            masters = [module[n].float() for n in names[: len(positions)]]
        per_param = [
            {k: v.float() for k, v in state.get(p, {}).items() if torch.is_tensor(v) and v.dim() > 0}
            for p in positions
        ]
    if len(masters) != len(names):
        raise CheckpointError(
            f"{where}: this ZeRO stage-0 checkpoint's optimizer holds {len(masters)} parameters and its model "
            f"{len(names)}: with frozen parameters left out of the optimizer the state cannot be matched to "
            "names. Load it with the setup that saved it (stage 0, the same precision)."
        )
    params: dict[str, dict[str, torch.Tensor]] = {}
    for name, master, moments_of in zip(names, masters, per_param, strict=True):
        params[name] = {FP32_KEY: master.reshape(module[name].shape), **moments_of}
    first: Mapping[str, Any] = next(iter(state.values()), {}) if state else {}
    scalars = [{k: v for k, v in first.items() if not (torch.is_tensor(v) and v.dim() > 0)} for _ in groups]
    hyper = [{k: v for k, v in group.items() if k != "params"} for group in groups]
    return params, hyper, scalars


class Slot:
    """Where one parameter's fp32 master lives in a stage-0 engine: a tensor, or a slice of a flat one."""

    def __init__(self, master: torch.Tensor, offset: int | None) -> None:
        self.master = master
        self.offset = offset

    def view(self, tensor: torch.Tensor, numel: int) -> torch.Tensor:
        return tensor.view(-1) if self.offset is None else tensor.narrow(0, self.offset, numel)


def stage0_slots(optimizer: Any) -> tuple[torch.optim.Optimizer, dict[int, Slot]]:
    """The optimizer that steps and, by ``id`` of each trainable parameter, its master's slot."""
    slots: dict[int, Slot] = {}
    if hasattr(optimizer, "fp32_groups_flat"):  # fused bf16/fp16
        for group, flat in zip(optimizer.fp16_groups, optimizer.fp32_groups_flat, strict=True):
            offset = 0
            for param in group:
                slots[id(param)] = Slot(flat, offset)
                offset += param.numel()
        return optimizer.optimizer, slots
    if hasattr(optimizer, "fp32_groups"):  # unfused bf16/fp16
        for group, masters in zip(optimizer.fp16_groups, optimizer.fp32_groups, strict=True):
            for param, master in zip(group, masters, strict=True):
                slots[id(param)] = Slot(master, None)
        return optimizer.optimizer, slots
    if isinstance(optimizer, torch.optim.Optimizer):  # fp32: the parameters step themselves
        for group in optimizer.param_groups:
            for param in group["params"]:
                slots[id(param)] = Slot(param, None)
        return optimizer, slots
    raise CheckpointError(
        f"This ZeRO stage-0 DeepSpeed optimizer ({type(optimizer).__name__}) keeps its fp32 masters where this "
        "loader does not look (fp32, FP16_Optimizer and FP16_UnfusedOptimizer can take a checkpoint of another "
        "layout). Load a checkpoint of the same layout, or use ZeRO stage 1, 2 or 3."
    )
