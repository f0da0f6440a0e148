"""The pipeline step of the composition (``pp_size > 1``): cut the model into stages, one per rank.

Where the model is cut is decided at ``prepare`` (so a model with fewer blocks than stages fails
there, on every rank alike): ``ParallelismConfig.pp_split_points`` names the modules that begin
stages 1, 2, ..., or ``"auto"`` balances the stages by parameter size over the model's blocks, with
``prepare_pippy``'s planner. The cutting itself waits for the first batch (see
:mod:`accelerate.backends.parallel.pipeline_model`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from accelerate.backends.dtensor_io.checkpoint_io import ShardedCheckpointIO, ShardedParts
from accelerate.backends.parallel.pipeline_model import PipelinedModel
from accelerate.backends.pipeline.split import resolve_split_points
from accelerate.state.pipeline_options import stages_per_rank
from accelerate.utils.errors import NotAvailableYetError


def check_pipeline_composition(config: Any) -> None:
    """Raises NotAvailableYetError for pipeline stages combined with a dimension other than
    ``dp_replicate`` (whole pipelines side by side): sharded or tensor-parallel stages are not built yet."""
    if not config.pp_enabled:
        return
    others = [dim for dim in config.active_mesh_dims if dim not in ("pp", "dp_replicate")]
    if others:
        sizes = ", ".join(f"{dim}_size={getattr(config, f'{dim}_size')}" for dim in others)
        raise NotAvailableYetError(
            f"ParallelismConfig(pp_size={config.pp_size}, {sizes}): pipeline parallelism does not compose "
            "with sharded or split stages in this version of accelerate (only with dp_replicate_size). Run "
            f"whole pipelines side by side (pp_size x dp_replicate_size processes), or drop pp_size and use "
            f"{', '.join(others)}."
        )


def pipeline_stages(
    model: nn.Module, config: Any, device: torch.device, *, device_placement: bool
) -> PipelinedModel:
    """``model`` as a :class:`PipelinedModel` over ``config``'s ``pp`` dimension.

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
    return PipelinedModel(model, config, points, device)


def keep_only(optimizer: torch.optim.Optimizer, ids: set[int]) -> None:
    """Trims ``optimizer``'s groups to the parameters in ``ids`` (this rank's stages); state goes with them."""
    for group in optimizer.param_groups:
        kept = [p for p in group["params"] if id(p) in ids]
        for param in group["params"]:
            if id(param) not in ids:
                optimizer.state.pop(param, None)
        group["params"] = kept


class PipelineCheckpointIO(ShardedCheckpointIO):
    """Refuses ``save_state`` / ``load_state`` under pipeline parallelism, which would write (or read)
    one stage's weights and optimizer as if they were the whole run's; ``save_model`` and
    ``get_state_dict`` gather every stage and work."""

    what = "pipeline-parallel models"

    def _refuse(self, call: str) -> NotAvailableYetError:
        return NotAvailableYetError(
            f"accelerator.{call} under ParallelismConfig(pp_size > 1) is not available in this version of "
            "accelerate: each rank trains only its stages. Save the whole model with "
            "accelerator.save_model(model, folder) (every stage gathered), and load it into the model "
            "before prepare to resume."
        )

    def plan_save(self, models: Sequence[nn.Module], optimizers: Sequence[Any]) -> ShardedParts | None:
        raise self._refuse("save_state")

    def load_model(
        self, reader: Any, index: int, model: nn.Module, *, strict: bool, rank: int, world_size: int
    ) -> bool:
        raise self._refuse("load_state")
