"""Expert parallelism (``ParallelismConfig(ep_size=N)``): each rank keeps ``1/N`` of every MoE layer's experts.

**The protocol an experts module follows** (transformers' fused MoE experts do, e.g. Qwen3-MoE's and
Mixtral's; a layer of one's own can too):

- it has an integer attribute ``num_experts``;
- its ``forward(hidden_states, top_k_index, top_k_weights)`` takes the ``(tokens, hidden)`` inputs and
  the router's top-k choices (``(tokens, k)`` expert indices and weights) and returns
  ``(tokens, hidden)``, ``sum_k weight_k * expert_k(token)``;
- each of its own parameters that belongs to the experts is stacked along dim 0, one slice per expert
  (shape ``(num_experts, ...)``); it reads ``num_experts`` and indexes those parameters by expert, so
  it computes the same with fewer experts (the ``num_experts`` local ones).

The router (which computes ``top_k_index`` / ``top_k_weights``), the non-expert weights and the
load-balancing loss stay as they are. :func:`apply_expert_parallel` finds every such module, keeps
this rank's slice of each stacked parameter as a ``DTensor`` sharded over the ``ep`` mesh (so
checkpoints hold whole experts and reshard to any ``ep``), and makes its forward
:func:`~accelerate.backends.parallel.expert_dispatch.dispatch_to_experts`, which calls the module's
own forward on the tokens that reach its local experts.

**With tensor parallelism** (``tp_size > 1``) the experts are replicated over ``tp``, not split:
the ranks of a tensor-parallel group read the same batch and hold the same (replicated) hidden
states between the tensor-parallel layers, so each ``tp`` rank dispatches them over its own expert
group (the ``ep`` ranks with its ``tp`` coordinate) and gets the same expert gradients as its ``tp``
peers, which stay equal without any exchange over ``tp``. Splitting each expert's intermediate
dimension over ``tp`` as well (Megatron's expert tensor parallelism) would cut the experts' compute
and memory by ``tp`` more, but fused weights such as ``gate_up_proj`` interleave two projections in
one dimension, which a ``Shard`` placement cannot express, and it needs the model's own protocol to
name which dimension is the intermediate one; replication needs neither and is exact.

**Gradients.** The expert parameters are not the model's FSDP units' (their ``ignored_params``):
after the exchange, an expert's gradient on its rank holds the contributions of the tokens of every
rank of its expert group. :class:`ExpertGradients` sums it over the ranks that hold the same experts
(the other expert groups: an all-reduce, or FSDP2's reduce-scatter when each experts module is its own
FSDP unit over them, see :meth:`ExpertGradients.shard_over_replicas`) and divides by the whole
data-parallel size, so it is the gradient of the global-batch mean loss, as FSDP's average is for the
other weights. It runs once per optimizer step, at clipping or at the step.
"""

from __future__ import annotations

import inspect
import math
import types
import weakref
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor, Shard

from accelerate.backends.fsdp.strategy import combine_norms, norm_parts, scale_grads
from accelerate.backends.parallel.expert_dispatch import dispatch_to_experts

_ROUTED = ("top_k_index", "top_k_weights")


@dataclass
class _Split:
    """What a split experts module keeps: its ``ep`` mesh and its local expert count."""

    mesh: Any
    local_count: int


_SPLIT: weakref.WeakKeyDictionary[nn.Module, _Split] = weakref.WeakKeyDictionary()


def _experts_count(module: nn.Module) -> int:
    return int(getattr(module, "num_experts"))  # noqa: B009 (nn.Module's __getattr__ types it as a Tensor)


def is_experts_module(module: nn.Module) -> bool:
    """Whether ``module`` follows the experts protocol (``num_experts`` and a routed forward)."""
    if not isinstance(getattr(module, "num_experts", None), int):
        return False
    try:
        params = inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):
        return False
    return all(name in params for name in _ROUTED)


def experts_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every experts module of ``model`` (see the protocol above), by qualified name."""
    return [(name, m) for name, m in model.named_modules() if is_experts_module(m)]


def expert_mesh(config: Any, device_type: str) -> Any:
    """The mesh ``(ep_replicate, ep)`` over the data-parallel ranks, ``(ep_replicate, ep, tp)`` with
    tensor parallelism: an ``ep`` row exchanges tokens; an ``ep_replicate`` column holds the same experts.

    ``ep`` is the inner factor of ``dp_shard`` (ranks fill the mesh row-major), so the ranks of one
    expert group are neighbours on the data-parallel grid, as the launcher's ``--dry_run`` prints them.
    ``tp`` is innermost, as on the run's mesh: each tensor-parallel rank has its own expert group, the
    ranks of the other data shards that share its ``tp`` coordinate.
    """
    from torch.distributed.device_mesh import init_device_mesh

    ep = int(config.ep_size)
    world = int(config.data_parallel_size)
    tp = int(config.tp_size) if config.tp_enabled else 1
    if tp > 1:
        shape, names = (world // ep, ep, tp), ("ep_replicate", "ep", "tp")
        return init_device_mesh(device_type, shape, mesh_dim_names=names)
    return init_device_mesh(device_type, (world // ep, ep), mesh_dim_names=("ep_replicate", "ep"))


def apply_expert_parallel(model: nn.Module, config: Any, device: torch.device) -> ExpertGradients:
    """Keeps this rank's experts of every experts module and routes tokens to the others' by all-to-all.

    Raises:
        ValueError: the model has no experts module, or a layer's experts do not divide over ``ep_size``.
    """
    found = experts_modules(model)
    ep = int(config.ep_size)
    if not found:
        raise ValueError(
            f"ParallelismConfig(ep_size={ep}) splits the experts of mixture-of-experts layers, but this "
            f"{type(model).__name__} has no experts module: one with an integer num_experts and "
            "forward(hidden_states, top_k_index, top_k_weights) (transformers' MoE experts, or your own "
            "following the protocol in accelerate.backends.parallel.experts). Leave ep_size unset otherwise."
        )
    for name, module in found:  # every layer checked before any is split
        count = _experts_count(module)
        if count % ep:
            raise ValueError(
                f"ParallelismConfig(ep_size={ep}): {name} has num_experts={count}, which does not divide "
                f"over {ep} ranks. Use an ep_size that divides {count}."
            )
    mesh = expert_mesh(config, device.type)
    params: list[nn.Parameter] = []
    for _, module in found:
        params += _shard_module(module, mesh["ep"], device)
    return ExpertGradients([m for _, m in found], params, mesh, int(config.data_parallel_size))


def _shard_module(module: nn.Module, ep_mesh: Any, device: torch.device) -> list[nn.Parameter]:
    total = _experts_count(module)
    ranks, rank = ep_mesh.size(), ep_mesh.get_local_rank()
    stacked = [
        (n, p) for n, p in module.named_parameters(recurse=False) if p.dim() >= 1 and p.shape[0] == total
    ]
    if not stacked:
        raise ValueError(
            f"{type(module).__name__} follows the experts protocol but has no parameter stacked by expert "
            f"(shape ({total}, ...)); expert parallelism splits those. Stack the experts' weights along dim 0."
        )
    out = []
    for name, param in stacked:
        # Each rank keeps its slice of the tensor it built (nothing is sent): the slices of different ranks
        # form one whole tensor, as FSDP2's shards do (ranks holding the same slice are then FSDP2-sharded).
        local = param.detach().to(device).chunk(ranks, dim=0)[rank].clone()
        shard = DTensor.from_local(local, ep_mesh, [Shard(0)], run_check=False)
        new = nn.Parameter(shard, requires_grad=param.requires_grad)
        setattr(module, name, new)
        out.append(new)
    _SPLIT[module] = _Split(ep_mesh, total // ranks)
    module.forward = types.MethodType(_dispatched_forward, module)
    return out


def _dispatched_forward(
    self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    split = _SPLIT[self]
    return dispatch_to_experts(
        hidden_states,
        top_k_index,
        top_k_weights,
        num_experts=_experts_count(self),
        group=split.mesh.get_group(),
        local_experts=lambda rows, index: _run_local(self, rows, index),
    )


def _run_local(module: nn.Module, rows: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """The module's own forward over its local experts: plain local tensors, ``num_experts`` of them,
    each row to one expert with weight 1 (the combine happens after the exchange back)."""
    split = _SPLIT[module]
    params = module._parameters
    kept = {n: cast(DTensor, p) for n, p in params.items() if isinstance(p, DTensor)}
    whole = _experts_count(module)
    setattr(module, "num_experts", split.local_count)  # noqa: B010 (read by the module's own forward)
    try:
        # The local tensors stand in for the parameters during this call (autograd reaches the DTensor
        # parameters through to_local); a plain swap costs less than torch.func.functional_call.
        for name, param in kept.items():
            local = param.to_local()
            if local.is_floating_point() and rows.is_floating_point() and local.dtype != rows.dtype:
                # FSDP2's mixed precision computes the other weights in rows' dtype; the experts keep
                # full-precision weights (and gradients) and compute in that dtype too.
                local = local.to(rows.dtype)
            params[name] = local  # type: ignore[assignment]
        ones = torch.ones(rows.shape[0], 1, dtype=rows.dtype, device=rows.device)
        # The class's forward itself: calling the module again would run its hooks (FSDP's) a second time.
        out: torch.Tensor = type(module).forward(module, rows, index.unsqueeze(-1), ones)
        if rows.shape[0] == 0 and torch.is_grad_enabled():
            # No token reached these experts: tie them to the output with a zero gradient, so every rank
            # has gradients to reduce at the step and the optimizer treats them alike.
            used = [params[n] for n, p in kept.items() if p.requires_grad]
            out = out + sum((p.sum() for p in used if p is not None), rows.new_zeros(())) * 0
    finally:
        params.update(kept)  # type: ignore[arg-type]
        setattr(module, "num_experts", whole)  # noqa: B010
    return out


class ExpertGradients:
    """Makes the expert parameters' gradients those of the global-batch mean loss, once per step.

    Each rank's expert gradient already sums its expert group's tokens (the all-to-all's backward);
    summing over ``ep_replicate`` adds the other groups' and dividing by the data-parallel size turns
    the sum of per-rank mean losses into their mean, as FSDP's average does for the other weights.
    """

    def __init__(
        self, modules: list[nn.Module], params: list[nn.Parameter], mesh: Any, data_parallel_size: int
    ) -> None:
        self.modules = modules
        self.params = params
        self.mesh = mesh
        self.data_parallel_size = data_parallel_size
        self.pending = False
        self.sharded = False  # FSDP2 over ep_replicate reduces them (see shard_over_replicas)

    def shard_over_replicas(self, **fsdp_kwargs: Any) -> None:
        """FSDP2 over the ranks that hold the same experts (``ep_replicate``), when there are several.

        Each experts module becomes its own FSDP unit on the ``ep_replicate`` dimension of the expert
        mesh (its parameters, already split over ``ep``, become 2-D shards, as tensor-parallel ones do).
        Its reduce-scatter averages the replicas' gradients; :meth:`reduce` then divides by ``ep`` too, so
        they are the global-batch mean, as without sharding. (FSDP2's own divide factor would need a
        pre-multiplied sum, which gloo has not.)
        """
        from torch.distributed.fsdp import fully_shard

        replicas = self.mesh["ep_replicate"]
        if replicas.size() <= 1:
            return
        for module in self.modules:
            fully_shard(module, mesh=replicas, **fsdp_kwargs)
        self.params = [p for m in self.modules for p in m.parameters(recurse=False) if isinstance(p, DTensor)]
        self.sharded = True

    def ids(self) -> set[int]:
        return {id(p) for p in self.params}

    def reduce(self) -> None:
        """Sums and scales the gradients accumulated since the last step (no-op when already done)."""
        if not self.pending:
            return
        self.pending = False
        replicas = self.mesh["ep_replicate"]
        for param in self.params:
            grad = param.grad
            if grad is None:  # frozen, or unused on every rank alike (the experts are tied to the output)
                continue
            local = grad.to_local() if isinstance(grad, DTensor) else grad
            if self.sharded:  # FSDP2 averaged over the replicas already
                local.div_(self.mesh["ep"].size())
                continue
            if replicas.size() > 1:
                dist.all_reduce(local, group=replicas.get_group())
            local.div_(self.data_parallel_size)


def clip_with_experts(
    params: list[torch.Tensor], max_norm: float, norm_type: float, experts: list[ExpertGradients]
) -> torch.Tensor:
    """Clips by the global norm, each expert counted once: the other weights' norm as FSDP computes it,
    plus the local experts' norm summed over the ``ep`` group (one collective on plain tensors)."""
    ids = set().union(*(group.ids() for group in experts if not group.sharded))
    other = [p.grad for p in params if p.grad is not None and id(p) not in ids]
    mine = [_local(p.grad) for p in params if p.grad is not None and id(p) in ids]
    parts = norm_parts(other, norm_type)
    local = torch.nn.utils.get_total_norm(mine, norm_type).to(torch.float32) if mine else torch.zeros(())
    group = experts[0].mesh["ep"].get_group()  # every rank calls this, whatever its experts received
    if math.isinf(norm_type):
        dist.all_reduce(local, op=dist.ReduceOp.MAX, group=group)
    else:
        local = local.pow(norm_type)
        dist.all_reduce(local, group=group)
        local = local.pow(1.0 / norm_type)
    total = combine_norms([*parts, local], norm_type)
    scale_grads([*other, *mine], max_norm, total)
    return total


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor
