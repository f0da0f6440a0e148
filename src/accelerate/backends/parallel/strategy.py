"""`ParallelStrategy`: tensor parallelism, then FSDP2 / HSDP, on one ``ParallelismConfig`` mesh.

A subclass of the FSDP strategy: every FSDP2 piece (blocks then root, mixed-precision policy,
optimizers pointed at the shards, ``no_sync`` on accumulation's off steps, clipping by the global
norm over every mesh) is the same code; what changes is the mesh ``fully_shard`` runs over (a
sub-mesh of the N-D mesh, see :func:`accelerate.backends.parallel.fsdp.fsdp_mesh`), the check that a
tensor-parallel plan was applied first, and the ranks the run reports.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

from accelerate.backends.dtensor_io.checkpoint_io import ShardedCheckpointIO
from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin
from accelerate.backends.fsdp.strategy import FSDPStrategy
from accelerate.backends.parallel.activation import apply_activation_checkpointing
from accelerate.backends.parallel.experts import ExpertGradients, apply_expert_parallel, clip_with_experts
from accelerate.backends.parallel.fsdp import REPLICATE_DIMS, fsdp_mesh
from accelerate.backends.parallel.pipeline import (
    PipelineCheckpointIO,
    check_pipeline_composition,
    keep_only,
    pipeline_stages,
)
from accelerate.backends.parallel.pipeline_model import PipelinedModel, clip_pipeline_grad_norm_
from accelerate.backends.parallel.sequence import apply_sequence_parallel
from accelerate.backends.parallel.tp import check_tensor_parallel
from accelerate.state.distributed_type import DistributedType
from accelerate.state.pipeline_options import check_batch


class ParallelStrategy(FSDPStrategy):
    """Composes a ``ParallelismConfig``'s dimensions: tp (applied by the user) or sp (Ulysses attention)
    -> AC -> FSDP2/HSDP (over ``dp_shard`` and ``sp``).

    Example:
        >>> accelerator = Accelerator(parallelism_config=ParallelismConfig(dp_shard_size=2, tp_size=2))
        >>> parallelize_module(model, accelerator.torch_device_mesh["tp"], plan)
        >>> model, optimizer = accelerator.prepare(model, optimizer)  # FSDP2 over dp_shard
    """

    name = "parallel"
    composes_parallelism = True

    def __init__(
        self,
        device: torch.device,
        config: Any,
        plugin: FullyShardedDataParallelPlugin | None,
        *,
        mixed_precision: str,
        num_processes: int,
        num_processes_per_node: int,
        process_type: DistributedType,
    ) -> None:
        super().__init__(
            device,
            # Without a plugin: FSDP2's defaults, sharded (DCP) checkpoints that reshard on load.
            plugin if plugin is not None else FullyShardedDataParallelPlugin(fsdp_version=2),
            mixed_precision=mixed_precision,
            num_processes=num_processes,
            num_processes_per_node=num_processes_per_node,
        )
        self.config = config
        check_pipeline_composition(config)
        self._pipelines: list[weakref.ref[PipelinedModel]] = []  # the pipelines prepared (pp_size > 1)
        self._experts: list[ExpertGradients] = []  # each prepared MoE model's expert parameters (ep_size > 1)
        # None: tensor parallelism alone (nothing to shard), or pipelines (replicas sync their stages' gradients)
        self._mesh = None if config.pp_enabled else fsdp_mesh(config)
        # Pipelines with dp_shard: FSDP2 shards each stage over this mesh once the model is cut (and
        # replicates tensor-parallel stages over dp_replicate: DTensor gradients are FSDP2's to average).
        sharded_stages = config.dp_shard_enabled or (config.tp_enabled and config.dp_replicate_enabled)
        self._stage_mesh = fsdp_mesh(config) if config.pp_enabled and sharded_stages else None
        # Upstream reports FSDP whenever FSDP2 shards; tensor parallelism alone keeps the process's type.
        self.distributed_type = DistributedType.FSDP if self._mesh is not None else process_type

    @property
    def shards(self) -> bool:
        """Whether FSDP2 shards parameters over a data-parallel dimension."""
        return self._mesh is not None

    def mesh_shape(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        names, sizes = self.config._get_mesh()
        return tuple(sizes), tuple(names)

    def data_parallel_ranks(self, process_index: int) -> tuple[int, int]:
        coords = self.config.coordinates(process_index)
        return coords["dp_replicate"], coords["dp_shard"]

    def transform_batches(self, dataloader: Any) -> Any:
        """With ``sp``: each batch becomes this rank's slice of its sequence (see ``sequence.py``)."""
        if self.config.sp_enabled:
            from accelerate.backends.parallel.sequence import SequenceSlicer

            sp = self.config.device_mesh["sp"]
            dataloader.batch_transform = SequenceSlicer(sp.get_local_rank(), sp.size())
        return dataloader

    def describe(self) -> str:
        shape, names = self.mesh_shape()
        mesh = " x ".join(f"{n}={s}" for n, s in zip(names, shape, strict=True))
        if self._stage_mesh is not None and tuple(self._stage_mesh.mesh_dim_names) == REPLICATE_DIMS:
            fsdp = "each stage replicated over dp_replicate by FSDP2 (HSDP with shard size 1)"
        elif self._stage_mesh is not None:
            fsdp = "each stage FSDP2 over " + "x".join(self._stage_mesh.mesh_dim_names)
        elif self._mesh is None:
            fsdp = "no FSDP"
        elif tuple(self._mesh.mesh_dim_names) == REPLICATE_DIMS:
            fsdp = "replicated over dp_replicate by FSDP2 (HSDP with shard size 1)"
        else:
            fsdp = "FSDP2 over " + "x".join(self._mesh.mesh_dim_names)
        if self.config.pp_enabled:
            tp = ", tensor-parallel stages on tp" if self.config.tp_enabled else ""
            return f"parallelism mesh [{mesh}]: pipeline of {self.config.pp_schedule} over pp{tp}, {fsdp}"
        split = "Ulysses sequence parallel on sp" if self.config.sp_enabled else "tensor parallel on tp"
        if self.config.ep_enabled:
            split = f"experts split over ep={self.config.ep_size} (all-to-all token dispatch)"
            if self.config.tp_enabled:  # the experts whole on each tp rank, the other weights' plan on tp
                split += f" and replicated over tp={self.config.tp_size}, tensor parallel on tp"
        return f"parallelism mesh [{mesh}]: {split}, {fsdp}"

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        super().setup_optimizer(optimizer)
        for ref in self._pipelines:
            pipelined = ref()
            if pipelined is not None:  # once traced, the optimizer keeps only this rank's stage parameters
                pipelined.when_built(functools.partial(keep_only, optimizer))

    def wrap_dataloader(self, dataloader: Any) -> Any:
        """Checks at prepare that a pipeline's micro-batches cut the loader's batches evenly."""
        total = getattr(dataloader, "total_batch_size", None) if self.config.pp_enabled else None
        if isinstance(total, int) and total > 0:  # samples per step over the data shards
            check_batch(self.config, total // self.config.data_parallel_size)
        return super().wrap_dataloader(dataloader)

    def checkpoint_io(self, run: Any = None) -> ShardedCheckpointIO:
        if self.config.pp_enabled:  # each rank saves its own stages
            live = [p for p in (ref() for ref in self._pipelines) if p is not None]
            return PipelineCheckpointIO(self.plugin.state_dict_type, live)
        return super().checkpoint_io(run)

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor] | None:
        """A pipelined model's whole weights, each stage's from the rank that trains it (on every rank)."""
        for ref in self._pipelines:
            pipelined = ref()
            if pipelined is not None and (model is pipelined or model is pipelined.module):
                return pipelined.gathered_state_dict()
        return super().full_state_dict(model)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, PipelinedModel) else model

    def before_backward(self, loss: torch.Tensor) -> None:
        super().before_backward(loss)
        if not self._no_sync:  # a synced backward: the expert gradients are reduced before clip or step
            for experts in self._experts:
                experts.pending = True

    def _reduce_experts(self) -> None:
        for experts in self._experts:
            experts.reduce()

    def optimizer_step(self, optimizer: torch.optim.Optimizer, step: Callable[[], Any]) -> Any:
        self._reduce_experts()
        return super().optimizer_step(optimizer, step)

    def _shard_kwargs(self, model: nn.Module) -> dict[str, Any]:
        kwargs = super()._shard_kwargs(model)
        mine = {id(p) for p in model.parameters()}
        experts = {p for group in self._experts if not group.sharded for p in group.params if id(p) in mine}
        if experts:  # split over ep and reduced by ExpertGradients, not the model's FSDP units
            kwargs["ignored_params"] = set(kwargs.get("ignored_params", set())) | experts
        return kwargs

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clips by the global norm; under a pipeline, the norm over every stage's gradients; with experts,
        each expert counted once (its ep rank's slice, after the reduction over its replicas)."""
        self._reduce_experts()
        if self._experts:
            return clip_with_experts(list(parameters), max_norm, norm_type, self._experts)
        if self.config.pp_enabled:
            group = self.config.device_mesh["pp"].get_group()
            return clip_pipeline_grad_norm_(self._trained(parameters), max_norm, norm_type, group)
        return super().clip_grad_norm_(parameters, max_norm, norm_type)

    def _split_experts(self, model: nn.Module, *, device_placement: bool) -> None:
        before = list(model.named_parameters())
        if device_placement:
            model.to(self.device)
        experts = apply_expert_parallel(model, self.config, self.device)
        self._experts.append(experts)
        if (
            self.config.data_parallel_size > self.config.ep_size
        ):  # replicas of the same experts: FSDP2 over them
            kwargs = {
                k: v for k, v in self._shard_kwargs(model).items() if k not in ("mesh", "ignored_params")
            }
            experts.shard_over_replicas(**kwargs)
        after = dict(model.named_parameters())
        for name, old in before:  # an optimizer built over the whole experts finds their slices
            new = after.get(name)
            if new is not None and new is not old:
                self._replaced[id(old)] = (weakref.ref(old), new)

    def _trained(self, parameters: Iterable[torch.Tensor]) -> list[torch.Tensor]:
        """The tensors trained for ``parameters`` (a pipelined model's: its stages' shards, once cut)."""
        out: list[torch.Tensor] = []
        for param in parameters:
            for ref in self._pipelines:
                pipelined = ref()
                trained = pipelined.shards.trained(param) if pipelined is not None else None
                if trained is not None:
                    param = trained
                    break
            out.append(param)
        return out

    def setup_module(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        if self.config.pp_enabled:  # the pipeline step: this rank's stages of the model
            check_tensor_parallel(model, self.config)  # a tp plan is applied to the whole model first
            kwargs = self._shard_kwargs(model) if self._stage_mesh is not None else {}
            for key in ("mesh", "ignored_params"):  # the stage's mesh; ignored modules are not supported
                kwargs.pop(key, None)
            pipelined = pipeline_stages(
                model,
                self.config,
                self.device,
                device_placement=device_placement,
                stage_mesh=self._stage_mesh,
                shard_kwargs=kwargs,
            )
            self._pipelines.append(weakref.ref(pipelined))
            self._sharded.update({id(p): weakref.ref(p) for p in model.parameters()})  # kept, not sharded
            return pipelined
        check_tensor_parallel(model, self.config)  # step 1: a plan on the tp mesh, applied before prepare
        if self.config.ep_enabled and not isinstance(model, FSDPModule):  # prepared once
            self._split_experts(model, device_placement=device_placement)  # step 1c: this rank's experts
        if self.config.sp_enabled:
            apply_sequence_parallel(model, self.config)  # step 1b: Ulysses attention, whole-sequence loss
        if self._mesh is not None:
            # Steps 2 and 4: activation checkpointing then fully_shard of blocks and root, on the sub-mesh.
            return super().setup_module(model, device_placement=device_placement)
        if device_placement:
            model.to(self.device)
        apply_activation_checkpointing(model, self.plugin)
        # No shards: the optimizer keeps the (tensor-parallel) parameters it was built over.
        self._sharded.update({id(p): weakref.ref(p) for p in model.parameters()})
        return model
