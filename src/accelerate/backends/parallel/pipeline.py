"""The pipeline step of the composition (``pp_size > 1``): cut the model into stages, one per rank.

Where the model is cut is decided at ``prepare`` (so a model with fewer blocks than stages fails
there, on every rank alike): ``ParallelismConfig.pp_split_points`` names the modules that begin
stages 1, 2, ..., or ``"auto"`` balances the stages by parameter size over the model's blocks, with
``prepare_pippy``'s planner. The cutting itself waits for the first batch (see
:mod:`accelerate.backends.parallel.pipeline_model`). ``save_state`` writes each rank's stages into
DCP folders (:class:`PipelineCheckpointIO`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate.backends.dtensor_io.checkpoint_io import ShardedCheckpointIO, ShardedParts, load_model
from accelerate.backends.dtensor_io.dcp import MODEL_KEY, OPTIMIZER_KEY, save_dcp
from accelerate.backends.dtensor_io.state_dict import (
    SHARDED_STATE_DICT,
    model_folder_name,
    optimizer_folder_name,
    optimizer_owner,
    raw_optimizer,
)
from accelerate.backends.fsdp.strategy import _shard_state
from accelerate.backends.parallel.pipeline_model import PipelinedModel
from accelerate.backends.parallel.pipeline_stage import StageShards
from accelerate.backends.pipeline.split import resolve_split_points
from accelerate.state.pipeline_options import stages_per_rank
from accelerate.storage.durable_io import FileRecord, SyncGroup
from accelerate.utils.errors import NotAvailableYetError


def check_pipeline_composition(config: Any) -> None:
    """Raises NotAvailableYetError for pipeline stages combined with a dimension other than
    ``dp_replicate`` (whole pipelines side by side), ``dp_shard`` (FSDP2 inside each stage) and ``tp``
    (tensor-parallel stages): context and sequence parallelism split what a stage receives."""
    if not config.pp_enabled:
        return
    others = [dim for dim in config.active_mesh_dims if dim not in ("pp", "dp_replicate", "dp_shard", "tp")]
    if others:
        sizes = ", ".join(f"{dim}_size={getattr(config, f'{dim}_size')}" for dim in others)
        raise NotAvailableYetError(
            f"ParallelismConfig(pp_size={config.pp_size}, {sizes}): pipeline parallelism does not compose "
            f"with {', '.join(others)} in this version of accelerate (only with dp_replicate_size, "
            f"dp_shard_size and tp_size). Compose the pipeline with those, or drop pp_size and use "
            f"{', '.join(others)}."
        )


def pipeline_stages(
    model: nn.Module,
    config: Any,
    device: torch.device,
    *,
    device_placement: bool,
    stage_mesh: Any = None,
    shard_kwargs: dict[str, Any] | None = None,
) -> PipelinedModel:
    """``model`` as a :class:`PipelinedModel` over ``config``'s ``pp`` dimension; with a ``stage_mesh``,
    each stage sharded by FSDP2 over it (``shard_kwargs`` go to ``fully_shard``).

    Raises:
        ValueError: the split points do not name modules of the model, or the model has too few
            blocks for ``pp_size`` x stages-per-rank stages.
    """
    if isinstance(model, PipelinedModel):
        raise ValueError("accelerator.prepare got a model that is already pipelined; prepare the model once.")
    stages = int(config.pp_size) * stages_per_rank(config)
    try:
        points = resolve_split_points(model, config.pp_split_points, stages, None)
    except ValueError as exc:
        raise ValueError(
            f"ParallelismConfig(pp_size={config.pp_size}, pp_schedule={config.pp_schedule!r}) needs the model "
            f"cut into {stages} stages: {exc}"
        ) from exc
    if device_placement:
        model = model.to(device)
    return PipelinedModel(model, config, points, device, stage_mesh=stage_mesh, shard_kwargs=shard_kwargs)


def keep_only(optimizer: torch.optim.Optimizer, shards: StageShards) -> None:
    """Trims ``optimizer``'s groups to this rank's stage parameters, pointed at what it trains (the shards
    under ``dp_shard``); the state of the parameters dropped goes with them."""
    for group in optimizer.param_groups:
        kept = []
        for param in group["params"]:
            trained = shards.trained(param)
            state = optimizer.state.pop(param, None)
            if trained is None:
                continue
            if state is not None:  # loaded before the first batch cut the model: kept, sharded like the shard
                optimizer.state[trained] = _shard_state(state, trained)
            kept.append(trained)
        group["params"] = kept


@dataclasses.dataclass
class PipelineParts(ShardedParts):
    """``save_state`` of pipelined models: DCP folders in which every rank writes its own stages.

    The stages' tensors keep the model's names and no two pipeline ranks hold the same one, so DCP
    writes each from the rank that trains it (replicas' identical copies once); loading reads any
    subset by name: this rank's stages, or the whole model (a 1-process run, or a pipeline not cut yet).
    """

    pipelines: dict[int, PipelinedModel] = dataclasses.field(default_factory=dict)

    def write(self, staging: Path, *, is_main_process: bool, sync: SyncGroup) -> dict[str, FileRecord]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        records: dict[str, FileRecord] = {}
        for index, pipelined in self.pipelines.items():
            state = {MODEL_KEY: pipelined.own_state_dict()}
            records.update(save_dcp(state, staging / model_folder_name(index), root=staging))
        for index, (optimizer, model) in self.optimizers.items():
            optim_state = {OPTIMIZER_KEY: get_optimizer_state_dict(model, raw_optimizer(optimizer))}
            records.update(save_dcp(optim_state, staging / optimizer_folder_name(index), root=staging))
        return records


class PipelineCheckpointIO(ShardedCheckpointIO):
    """The sharded-model I/O, plus pipelined models saved stage by stage (:class:`PipelineParts`).

    A DCP folder loads by name into whatever the model holds: the whole model before the first batch
    cuts it, this rank's stages after (their shards and DTensors, see ``PipelinedModel.trained_view``).
    """

    what = "pipeline-parallel models"

    def __init__(self, state_dict_type: Any, pipelines: Sequence[PipelinedModel]) -> None:
        super().__init__(state_dict_type)
        self.pipelines = list(pipelines)

    def _pipeline_of(self, model: nn.Module) -> PipelinedModel | None:
        return next((p for p in self.pipelines if model is p.module or model is p), None)

    def _trained(self, models: Sequence[nn.Module]) -> list[nn.Module]:
        """``models`` with each pipelined one replaced by what its rank trains (see ``trained_view``)."""
        out = []
        for model in models:
            pipelined = self._pipeline_of(model)
            out.append(pipelined.trained_view() if pipelined is not None else model)
        return out

    def plan_save(self, models: Sequence[nn.Module], optimizers: Sequence[Any]) -> ShardedParts | None:
        mine = {i: p for i, m in enumerate(models) if (p := self._pipeline_of(m)) is not None}
        if not mine:
            return super().plan_save(models, optimizers)
        trained = self._trained(models)
        owned: dict[int, tuple[Any, nn.Module]] = {}
        for index, optimizer in enumerate(optimizers):
            owner = optimizer_owner(optimizer, trained)
            if owner in mine:
                owned[index] = (optimizer, trained[owner])
        return PipelineParts(
            {i: p.module for i, p in mine.items()}, owned, SHARDED_STATE_DICT, pipelines=mine
        )

    def load_model(
        self, reader: Any, index: int, model: nn.Module, *, strict: bool, rank: int, world_size: int
    ) -> bool:
        # Once cut, this rank's stages load their share (the shards under dp_shard, not the model's copies).
        pipelined = self._pipeline_of(model)
        if pipelined is None or pipelined.schedule is None:
            return super().load_model(reader, index, model, strict=strict, rank=rank, world_size=world_size)
        view = pipelined.trained_view()
        return load_model(reader, index, view, strict=strict, rank=rank, world_size=world_size, part=True)

    def load_optimizer(
        self,
        reader: Any,
        index: int,
        optimizer: Any,
        models: Sequence[nn.Module],
        *,
        rank: int,
        world_size: int,
    ) -> None:
        super().load_optimizer(
            reader, index, optimizer, self._trained(models), rank=rank, world_size=world_size
        )
