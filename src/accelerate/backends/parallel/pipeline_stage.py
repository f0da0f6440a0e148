"""What a pipeline stage becomes inside a 3-D mesh: tensor-parallel over ``tp``, FSDP2 over ``dp_shard``.

A traced stage is a ``GraphModule`` whose graph reads its parameters by attribute, not by calling
the model's submodules: hooks on those submodules never run. That shapes both compositions:

- ``tp``: the user applies the tensor-parallel plan to the whole model before ``prepare``, as without
  a pipeline. torch's tracer cannot capture DTensor parameters or the plan's hooks, so the model is
  traced with plain stand-ins (:func:`plain_for_tracing`); the stage then takes the plan's DTensors
  back, the other parameters become replicated DTensors on the ``tp`` mesh, and the stage's forward
  runs on DTensors: its inputs enter replicated, its outputs leave whole. DTensor's sharding
  propagation does what the plan's hooks would have done (the gradients are exact; some
  redistributions may differ from the hand-placed ones).
- ``dp_shard``: FSDP2 shards the stage as one unit (``fully_shard`` on the stage root, whose forward
  the schedule calls; torch's pipeline stage drives the gradient sync: a reduce-scatter after the
  last micro-batch of every step).

The stage's parameters are then other tensors than the model's; :class:`StageShards` remembers which
model parameter each stands for, so the optimizers, clipping and checkpoints built over
``model.parameters()`` reach them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn


class StageShards:
    """The parameters of a rank's stages by identity: the model's originals -> the tensors trained."""

    def __init__(self) -> None:
        self._by_id: dict[int, torch.Tensor] = {}

    def add(self, before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]) -> None:
        """Pairs a stage's parameters before and after sharding, by name."""
        for name, param in before.items():
            self._by_id[id(param)] = after.get(name, param)

    def trained(self, param: torch.Tensor) -> torch.Tensor | None:
        """The tensor this rank trains for the model's ``param`` (itself unless sharded), or None."""
        return self._by_id.get(id(param))

    def __len__(self) -> int:
        return len(self._by_id)


def _is_dtensor(value: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def _placement_hook(hook: Any) -> bool:
    """Whether a module hook was registered by torch's tensor-parallel plan (``distribute_module``)."""
    target = hook.func if isinstance(hook, functools.partial) else hook
    return str(getattr(target, "__module__", "")).startswith("torch.distributed.tensor")


@contextlib.contextmanager
def plain_for_tracing(model: nn.Module) -> Iterator[None]:
    """``model`` without its tensor-parallel plan while torch's tracer runs: every DTensor parameter
    replaced by a plain zero tensor of its global shape, the plan's hooks set aside (both put back)."""
    swapped: list[tuple[nn.Module, str, nn.Parameter]] = []
    hidden: list[tuple[dict[int, Any], int, Any]] = []
    try:
        for module in model.modules():
            for name, param in list(module.named_parameters(recurse=False)):
                if _is_dtensor(param):
                    local = param.to_local()  # type: ignore[attr-defined]
                    stand_in = torch.zeros(param.shape, dtype=param.dtype, device=local.device)
                    setattr(module, name, nn.Parameter(stand_in, requires_grad=param.requires_grad))
                    swapped.append((module, name, param))
            for hooks in (module._forward_pre_hooks, module._forward_hooks):
                for key, hook in list(hooks.items()):
                    if _placement_hook(hook):
                        hidden.append((hooks, key, hooks.pop(key)))
        yield
    finally:
        for module, name, param in swapped:
            setattr(module, name, param)
        for hooks, key, hook in hidden:
            hooks[key] = hook


def _set_parameter(root: nn.Module, name: str, value: nn.Parameter) -> None:
    owner_name, _, leaf = name.rpartition(".")
    setattr(root.get_submodule(owner_name) if owner_name else root, leaf, value)


def tensor_parallel_stage(stage: nn.Module, originals: Mapping[str, torch.Tensor], tp_mesh: Any) -> None:
    """Makes a traced ``stage`` (plain stand-ins) run tensor-parallel over ``tp_mesh``: the plan's DTensors
    back in place, the other parameters replicated, DTensor inputs in and whole outputs out."""
    from torch.distributed.tensor import DTensor, Replicate

    for name, param in list(stage.named_parameters()):
        original = originals.get(name, param)
        if not _is_dtensor(original):
            local = original.detach()
            original = nn.Parameter(
                DTensor.from_local(local, tp_mesh, [Replicate()], run_check=False),
                requires_grad=original.requires_grad,
            )
        _set_parameter(stage, name, original)  # type: ignore[arg-type]
    _wrap_forward(stage, functools.partial(_on_dtensors, tp_mesh=tp_mesh))


def _wrap_forward(stage: nn.Module, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    # A GraphModule's class is its own (torch makes one per instance): its forward can be wrapped.
    cls = type(stage)
    cls.forward = wrapper(cls.forward)


def _known_kwargs_only(forward: Callable[..., Any], known: frozenset[str]) -> Callable[..., Any]:
    @functools.wraps(forward)
    def run(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return forward(self, *args, **{k: v for k, v in kwargs.items() if k in known})

    return run


def take_known_kwargs(stage: nn.Module) -> None:
    """Lets ``stage`` take every keyword input of the model call, keeping those its graph reads.

    torch's schedules hand a rank's keyword inputs to each of its stages: the first stage reads
    ``input_ids``, the last ``labels`` (a model that computes its own loss), an interleaved rank holds both.
    """
    graph = getattr(stage, "graph", None)
    if graph is None:
        return
    known = frozenset(str(node.target) for node in graph.nodes if node.op == "placeholder")
    _wrap_forward(stage, functools.partial(_known_kwargs_only, known=known))


def _on_dtensors(forward: Callable[..., Any], *, tp_mesh: Any) -> Callable[..., Any]:
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.experimental import implicit_replication

    def enter(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and not isinstance(value, DTensor):
            return DTensor.from_local(value, tp_mesh, [Replicate()], run_check=False)
        return value

    def leave(value: Any) -> Any:
        return value.full_tensor() if isinstance(value, DTensor) else value

    @functools.wraps(forward)
    def run(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        args = tuple(enter(a) for a in args)
        kwargs = {k: enter(v) for k, v in kwargs.items()}
        with implicit_replication():  # tensors the graph makes itself (masks, positions) count as replicated
            out = forward(self, *args, **kwargs)
        if isinstance(out, tuple | list):
            return type(out)(leave(v) for v in out)
        if isinstance(out, dict):
            return {k: leave(v) for k, v in out.items()}
        return leave(out)

    return run


def compose_stage(
    stage: nn.Module,
    shards: StageShards,
    originals: Mapping[str, torch.Tensor],
    *,
    tp_mesh: Any = None,
    mesh: Any = None,
    **kwargs: Any,
) -> None:
    """Makes ``stage`` tensor-parallel over ``tp_mesh`` and/or ``fully_shard``s it over ``mesh`` (each when
    given), recording in ``shards`` what each of the model's parameters (``originals``, by name) became."""
    before = {name: originals.get(name, p) for name, p in stage.named_parameters()}
    take_known_kwargs(stage)
    if tp_mesh is not None:
        tensor_parallel_stage(stage, originals, tp_mesh)
    if mesh is not None and before:
        from torch.distributed.fsdp import fully_shard

        fully_shard(stage, mesh=mesh, **kwargs)
    shards.add(before, dict(stage.named_parameters()))


def named_view(modules: list[nn.Module]) -> nn.Module:
    """One module holding the parameters and buffers of ``modules`` (a rank's stages) under their own
    names, the same tensor objects: what loading, saving and optimizer-state code reads by name."""
    root = nn.Module()
    for module in modules:
        for kind, named in (("param", module.named_parameters()), ("buffer", module.named_buffers())):
            for name, tensor in named:
                *path, leaf = name.split(".")
                owner = root
                for part in path:
                    if not hasattr(owner, part):
                        owner.add_module(part, nn.Module())
                    owner = getattr(owner, part)
                if kind == "param":
                    owner.register_parameter(leaf, tensor)  # type: ignore[arg-type]
                else:
                    owner.register_buffer(leaf, tensor)
    return root


def full_tensor(value: torch.Tensor) -> torch.Tensor:
    """A sharded (DTensor) value gathered whole; any other tensor as is."""
    return value.full_tensor() if _is_dtensor(value) else value  # type: ignore[attr-defined]


def _local(value: torch.Tensor) -> torch.Tensor:
    """``value``'s data on this rank: a DTensor's local piece, any other tensor itself."""
    return value._local_tensor if _is_dtensor(value) else value  # type: ignore[attr-defined]


def _storage(value: torch.Tensor) -> torch.UntypedStorage:
    return _local(value).untyped_storage()


def is_released(value: torch.Tensor) -> bool:
    """Whether ``value`` holds no data on this rank (a tensor freed by :func:`release_other_stages`)."""
    return _local(value).numel() == 0


def release_other_stages(model: nn.Module, stages: list[nn.Module]) -> int:
    """Frees the data of every parameter and buffer of ``model`` that none of ``stages`` (this rank's)
    holds, and returns the bytes freed.

    The tensors stay the same Python objects, their data replaced by an empty tensor of their dtype
    (``.data``, which frees the storage): the optimizers, clipping and the stage bookkeeping
    (:class:`StageShards`) find the model's parameters by identity, and the model keeps its names for
    checkpoints. Moving them to the meta device instead (keeping the shapes) would need
    ``torch.utils.swap_tensors``, which refuses tensors with weak references (the strategy keeps
    some); an empty tensor also fails loudly where stale weights would pass: any computation with
    it has the wrong shape. Under ``dp_shard`` the model's copies of this rank's own stage go too
    (FSDP2 trains shards it made of them).
    """
    held = {_storage(t).data_ptr() for stage in stages for t in (*stage.parameters(), *stage.buffers())}
    freed = 0
    for value in (*model.parameters(), *model.buffers()):
        local = _local(value)
        if local.numel() == 0 or _storage(value).data_ptr() in held:
            continue  # freed already (a tensor listed twice), or a stage's own
        freed += _storage(value).nbytes()
        local.data = torch.empty(0, dtype=local.dtype, device=local.device)
    return freed


def guard_released(model: nn.Module) -> None:
    """Makes ``model.state_dict()`` an error once other stages' tensors were freed.

    It would otherwise return empty tensors for them without a word, and a ``torch.save`` of it
    would write a checkpoint missing most of the model: a silently wrong result. Accelerate's own
    reads run inside :func:`~accelerate.checkpointing.internal_reads.internal_state_read`.
    """
    from accelerate.checkpointing.internal_reads import is_internal_state_read

    def refuse(module: nn.Module, prefix: str, keep_vars: bool) -> None:
        if not is_internal_state_read():
            raise RuntimeError(
                f"{type(module).__name__}.state_dict() on a pipeline rank: this rank keeps only the stages "
                "it runs (the others' tensors were freed after the model was cut), so the state dict would "
                "hold empty tensors for them. Use accelerator.get_state_dict(model) for the whole model's "
                "tensors (gathered from every stage) or accelerator.save_model(model, folder)."
            )

    model.register_state_dict_pre_hook(refuse)  # type: ignore[no-untyped-call]
