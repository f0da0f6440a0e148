"""Fully sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``) on a DeviceMesh.

``setup_module`` shards each block the wrap policy picks, children first, then the root, in place:
the user's module object stays the same, its parameters become ``DTensor`` shards (each rank holds
about ``1/N`` of every sharded tensor). An optimizer built over the original parameters is pointed at
the shards by ``setup_optimizer`` (hyper-parameters and state kept). FSDP1 settings arrive already
translated by the plugin (:func:`accelerate.backends.fsdp.plugin.fsdp2_layout`).
"""

from __future__ import annotations

import contextlib
import copy
import math
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from accelerate.backends.base import Strategy
from accelerate.backends.dtensor_io.checkpoint_io import ShardedCheckpointIO
from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin, ignored_module_list
from accelerate.backends.fsdp.wrap import modules_to_shard
from accelerate.state.distributed_type import DistributedType


class FSDPStrategy(Strategy):
    name = "fsdp"
    # fully_shard's hooks are on the blocks: they compile themselves after sharding (compile_regions_fsdp2).
    compiles_regions_in_place = True

    def __init__(
        self,
        device: torch.device,
        plugin: FullyShardedDataParallelPlugin,
        *,
        mixed_precision: str,
        num_processes: int,
        num_processes_per_node: int,
    ) -> None:
        super().__init__(device, DistributedType.FSDP)
        # The strategy's own copy: the mixed-precision and offload policies are set on it, so the
        # caller's plugin object stays as they built it (and can configure another Accelerator).
        plugin = copy.copy(plugin)
        self.plugin = plugin
        plugin.set_mixed_precision(mixed_precision)
        if plugin.cpu_offload:
            plugin.validate_cpu_offload()
            if device.type != "cuda":
                raise ValueError(
                    f"FullyShardedDataParallelPlugin(cpu_offload=True) (--fsdp_offload_params true) moves sharded "
                    f"parameters off the GPU, but this process trains on {device}. Drop cpu_offload, or train on GPUs."
                )
            plugin.set_cpu_offload()
        self.num_processes = num_processes
        self.num_processes_per_node = max(1, num_processes_per_node)
        self._mesh: Any = None
        # id(original parameter) -> (weak reference to it, its shard): how optimizers find the shards.
        self._replaced: dict[int, tuple[weakref.ref[nn.Parameter], nn.Parameter]] = {}
        self._sharded: dict[int, weakref.ref[nn.Parameter]] = {}  # by id: tensors compare elementwise
        self._no_sync: set[int] = set()

    # ------------------------------------------------------------------ mesh
    def mesh_shape(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The mesh for the plugin's layout: 1-D sharding, or (replicate, shard) for NO_SHARD / HYBRID_SHARD."""
        world = self.num_processes
        kind = getattr(self.plugin, "mesh_kind", "shard")
        if kind == "replicate":
            return (world, 1), ("dp_replicate", "dp_shard")
        if kind == "hybrid":
            per_node = self.num_processes_per_node if world % self.num_processes_per_node == 0 else world
            return (world // per_node, per_node), ("dp_replicate", "dp_shard")
        return (world,), ("dp_shard",)

    def data_parallel_ranks(self, process_index: int) -> tuple[int, int]:
        """(replica, shard) in the mesh: ranks fill the shard dimension first (``(dp_replicate, dp_shard)``).

        Full sharding gives (0, process_index); NO_SHARD (process_index, 0); hybrid (node, rank on node).
        """
        shape, names = self.mesh_shape()
        shard_size = shape[names.index("dp_shard")]
        return process_index // shard_size, process_index % shard_size

    @property
    def mesh(self) -> Any:
        if self._mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            shape, names = self.mesh_shape()
            self._mesh = init_device_mesh(self.device.type, shape, mesh_dim_names=names)
        return self._mesh

    def describe(self) -> str:
        """What the settings became on FSDP2 (for logs and ``launch --dry_run``)."""
        shape, names = self.mesh_shape()
        return describe_layout(self.plugin, shape, names)

    # ------------------------------------------------------------------ model
    def _shard_kwargs(self, model: nn.Module) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "mesh": self.mesh,
            "reshard_after_forward": self.plugin.reshard_after_forward,
        }
        if self.plugin.mixed_precision_policy is not None:
            kwargs["mp_policy"] = self.plugin.mixed_precision_policy
        if self.plugin.cpu_offload:
            kwargs["offload_policy"] = self.plugin.cpu_offload
        ignored = ignored_module_list(model, self.plugin.ignored_modules)
        if ignored:
            kwargs["ignored_params"] = {p for m in ignored for p in m.parameters()}
        return kwargs

    def setup_module(self, model: nn.Module, *, device_placement: bool) -> nn.Module:
        if isinstance(model, FSDPModule):
            return model
        if not any(p.requires_grad for p in model.parameters()):
            # Frozen modules (teachers, metrics) need no gradient sync: placed, not sharded.
            return super().setup_module(model, device_placement=device_placement)
        before = list(model.named_parameters())
        broadcast = bool(self.plugin.cpu_ram_efficient_loading or self.plugin.sync_module_states)
        full_state: dict[str, torch.Tensor] = {}
        kept_buffers: dict[str, torch.Tensor] = {}
        if broadcast:
            full_state, kept_buffers = _take_rank0_state(model)
        elif device_placement:
            model.to(self.device)
        blocks = modules_to_shard(self.plugin, model)
        if self.plugin.activation_checkpointing:
            from torch.distributed._composable import checkpoint

            for block in blocks:
                checkpoint(block)
        kwargs = self._shard_kwargs(model)
        for block in blocks:
            fully_shard(block, **kwargs)
        if kwargs["reshard_after_forward"] is True:
            # The root's parameters are needed again as soon as backward starts: torch's default (None)
            # keeps them gathered for the root only, saving one all-gather per step.
            kwargs["reshard_after_forward"] = None
        fully_shard(model, **kwargs)
        if broadcast:
            _broadcast_from_rank0(model, full_state, kept_buffers, self.device)
        after = dict(model.named_parameters())
        for name, old in before:
            new = after.get(name)
            if new is not None and new is not old:
                self._replaced[id(old)] = (weakref.ref(old), new)
        self._sharded.update({id(p): weakref.ref(p) for p in after.values()})
        return model

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Points ``optimizer`` at the shards of the parameters it was built over.

        Raises:
            ValueError: it holds parameters of no model prepared under FSDP.
        """
        foreign = 0
        for group in optimizer.param_groups:
            params = []
            for param in group["params"]:
                new = self._shard_of(param)
                if new is None:
                    foreign += 1
                    params.append(param)
                    continue
                if new is not param and param in optimizer.state:
                    optimizer.state[new] = _shard_state(optimizer.state.pop(param), new)
                params.append(new)
            group["params"] = params
        if foreign:
            raise ValueError(
                f"The optimizer holds {foreign} parameter(s) that belong to no model prepared with FSDP. Under FSDP "
                "the model's parameters are replaced by shards at prepare: build the optimizer over "
                "model.parameters() and prepare the model first, e.g. accelerator.prepare(model, optimizer)."
            )

    def _shard_of(self, param: torch.Tensor) -> torch.Tensor | None:
        mine = self._sharded.get(id(param))
        if mine is not None and mine() is param:
            return param
        entry = self._replaced.get(id(param))
        if entry is not None and entry[0]() is param:
            return entry[1]
        return None

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model  # fully_shard works in place: the module is the user's own

    def checkpoint_io(self, run: Any = None) -> ShardedCheckpointIO:
        """DCP folders (SHARDED_STATE_DICT) or process 0's full files, as the plugin's state_dict_type says."""
        return ShardedCheckpointIO(self.plugin.state_dict_type)

    # ------------------------------------------------------------------ gradients
    @contextlib.contextmanager
    def no_sync(self, model: nn.Module) -> Iterator[None]:
        if not isinstance(model, FSDPModule):
            yield
            return
        # FSDP2 keeps the unsharded gradients locally and reduce-scatters their sum at the next synced backward.
        model.set_requires_gradient_sync(False)
        self._no_sync.add(id(model))
        try:
            yield
        finally:
            self._no_sync.discard(id(model))
            model.set_requires_gradient_sync(True)

    @contextlib.contextmanager
    def sync_in_backward(self, model: nn.Module) -> Iterator[None]:
        if not isinstance(model, FSDPModule):
            yield
            return
        model.set_requires_gradient_sync(True)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(id(model) not in self._no_sync)

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clips by the norm over every rank's shards and returns that global norm (a plain tensor)."""
        params = [p for p in parameters if p.grad is not None]
        grads = [p.grad for p in params if p.grad is not None]
        sharded = [g for g in grads if isinstance(g, DTensor)]
        plain = [g for g in grads if not isinstance(g, DTensor)]
        if not params:
            return torch.tensor(0.0)
        meshes = {id(g.device_mesh) for g in sharded}
        if not plain and len(meshes) == 1:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
            return norm.full_tensor() if isinstance(norm, DTensor) else norm
        # Grads on several meshes (tensor parallel + FSDP), or sharded and plain together: one norm per
        # (mesh, placements) group, each reduced over its own mesh, then combined by hand.
        total = combine_norms(norm_parts(grads, norm_type), norm_type)
        scale_grads(grads, max_norm, total)
        return total


def norm_parts(grads: list[torch.Tensor], norm_type: float) -> list[torch.Tensor]:
    """The global norm of ``grads`` in parts: one per (mesh, placements) group of DTensors, each reduced over
    its own mesh (one collective per group, not per gradient), and one for the plain tensors (local)."""
    groups: dict[tuple[int, tuple[Any, ...]], list[torch.Tensor]] = {}
    plain = []
    for g in grads:
        if isinstance(g, DTensor):
            groups.setdefault((id(g.device_mesh), tuple(g.placements)), []).append(g)
        else:
            plain.append(g)
    parts = [_full(torch.nn.utils.get_total_norm(group, norm_type)) for group in groups.values()]
    if plain:
        parts.append(torch.nn.utils.get_total_norm(plain, norm_type))
    return parts


def combine_norms(parts: list[torch.Tensor], norm_type: float) -> torch.Tensor:
    """The norm of the parts' norms (their max for the infinity norm), on the CPU."""
    if not parts:
        return torch.tensor(0.0)
    stacked = torch.stack([p.to(torch.float32).cpu() for p in parts])
    return stacked.max() if math.isinf(norm_type) else stacked.pow(norm_type).sum().pow(1.0 / norm_type)


def scale_grads(grads: list[torch.Tensor], max_norm: float, total: torch.Tensor) -> None:
    """Multiplies every gradient by ``max_norm / total`` when that is below 1 (one foreach call per mesh:
    a foreach over DTensors of different meshes, or mixed with plain tensors, is not dispatched)."""
    coef = min(1.0, max_norm / (float(total) + 1e-6))
    if coef >= 1.0:
        return
    groups: dict[int | None, list[torch.Tensor]] = {}
    for g in grads:
        groups.setdefault(id(g.device_mesh) if isinstance(g, DTensor) else None, []).append(g)
    for group in groups.values():
        torch._foreach_mul_(group, coef)


def _full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _shard_state(state: dict[str, Any], param: torch.Tensor) -> dict[str, Any]:
    """Optimizer state of a full parameter, sharded like ``param`` (scalars such as ``step`` kept)."""
    if not isinstance(param, DTensor):
        return state
    out: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor) and not isinstance(value, DTensor) and value.shape == param.shape:
            # Every rank holds the same full state: each keeps its own piece, nothing is sent.
            value = distribute_tensor(
                value.to(param.device), param.device_mesh, param.placements, src_data_rank=None
            )
        out[key] = value
    return out


def _take_rank0_state(model: nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Rank 0's full state (the only real copy), and buffers outside the state dict that hold data."""
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    persistent = set(model.state_dict().keys())
    kept = {n: b for n, b in model.named_buffers() if n not in persistent and not b.is_meta}
    full = {k: v.detach() for k, v in model.state_dict().items()} if rank == 0 else {}
    if rank == 0 and any(v.is_meta for v in full.values()):
        meta = [k for k, v in full.items() if v.is_meta][:5]
        raise ValueError(
            f"cpu_ram_efficient_loading: rank 0 must hold the real weights, but {meta} are on the meta device. "
            "Load the model normally on rank 0 (init_empty_weights only on the other ranks)."
        )
    ties = tied_parameters(model)
    model.to("meta")  # rank 0 keeps its weights only in `full`: one copy in host memory
    retie(ties)  # Module.to() gives each place of a shared parameter its own copy
    return full, kept


def _broadcast_from_rank0(
    model: nn.Module, full: dict[str, torch.Tensor], kept: dict[str, torch.Tensor], device: torch.device
) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    ties = tied_parameters(model)
    model.to_empty(device=device)
    retie(ties)
    for name, buffer in kept.items():
        owner, _, attr = name.rpartition(".")
        model.get_submodule(owner).register_buffer(attr, buffer.to(device), persistent=False)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, dict(full), options=options)


def tied_parameters(model: nn.Module) -> list[list[tuple[nn.Module, str]]]:
    """Every parameter held in more than one place (tied embeddings), as its (module, attribute) places."""
    places: dict[int, list[tuple[nn.Module, str]]] = {}
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            places.setdefault(id(param), []).append((module, name))
    return [group for group in places.values() if len(group) > 1]


def retie(ties: list[list[tuple[nn.Module, str]]]) -> None:
    """Makes each group's places hold the first place's parameter again."""
    for (first, first_name), *others in ties:
        shared = first._parameters[first_name]
        for module, name in others:
            module._parameters[name] = shared


def describe_layout(
    plugin: FullyShardedDataParallelPlugin, shape: tuple[int, ...], names: tuple[str, ...]
) -> str:
    """One line: how the plugin's settings run on FSDP2."""
    mesh = " x ".join(f"{n}={s}" for n, s in zip(names, shape, strict=True))
    source = (
        f"fsdp_version 1, sharding_strategy {plugin.sharding_strategy}"
        if plugin.fsdp_version == 1
        else "fsdp_version 2"
    )
    return f"{source} -> FSDP2 fully_shard(reshard_after_forward={plugin.reshard_after_forward}) on mesh [{mesh}]"
