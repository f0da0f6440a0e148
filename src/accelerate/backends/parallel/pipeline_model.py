"""Pipeline-parallel training: the prepared model whose forward runs one batch through a torch schedule.

A pipeline cannot run forward and backward apart: the schedule (GPipe, 1F1B, interleaved 1F1B from
``torch.distributed.pipelining``) interleaves the micro-batches' forwards and backwards across the
stages, and the loss must run inside it, on the last stage. So the one thing pipeline training adds
to the five-line loop is the loss function, given once as ``ParallelismConfig(pp_loss_fn=...)``, and
the labels go to the model call::

    loss = model(inputs, labels=labels)  # forward AND backward of every micro-batch, on every stage
    accelerator.backward(loss)           # nothing left to do: kept so the loop reads as ever
    optimizer.step(); optimizer.zero_grad()

The forward with gradients enabled runs ``schedule.step``; the value it returns is the mean of the
micro-batches' losses, sent from the last stage to every rank (a tensor whose backward touches no
parameter). Gradients are those of the whole batch's mean loss divided by the accumulation steps,
exactly what ``accelerator.backward(loss_fn(model(x), y))`` leaves without a pipeline. Under
``torch.no_grad()`` the forward only evaluates (``schedule.eval``): the loss when labels are given,
else the last stage's output, on every rank.

The model is traced and cut at its first call (torch's tracer needs one real micro-batch); the stage
modules share the model's parameter objects, so the optimizers prepared with it are trimmed then to
this rank's stage parameters. Then the model's tensors that no stage of this rank holds are freed
(see :func:`~accelerate.backends.parallel.pipeline_stage.release_other_stages`): a rank keeps only
its stages' weights (their ``tp`` pieces, their ``dp_shard`` shards); ``get_state_dict`` and
``save_model`` gather each tensor from the rank that holds it. With ``tp`` each stage runs on DTensors, with
``dp_shard`` it is sharded by FSDP2 (see :mod:`accelerate.backends.parallel.pipeline_stage`); the
optimizers are pointed at what the stages train.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from accelerate.backends.parallel.pipeline_stage import (
    StageShards,
    compose_stage,
    full_tensor,
    guard_released,
    is_released,
    named_view,
    plain_for_tracing,
    release_other_stages,
)
from accelerate.checkpointing.internal_reads import internal_state_read
from accelerate.state.pipeline_options import check_batch, microbatches, stages_per_rank


class PipelinedModel(nn.Module):
    """``module`` run as pipeline stages over the ``pp`` dimension of ``config``'s mesh.

    Example:
        >>> config = ParallelismConfig(pp_size=2, pp_schedule="GPipe", pp_loss_fn=F.mse_loss)
        >>> model, optimizer, loader = Accelerator(parallelism_config=config).prepare(model, optimizer, loader)
        >>> loss = model(x, labels=y)  # the whole pipelined step; the loss on every rank
    """

    wraps_user_module = (
        True  # unwrap_model returns ``module`` (utils/modeling.py's extract_model_from_parallel)
    )

    def __init__(
        self,
        module: nn.Module,
        config: Any,
        split_points: list[str],
        device: torch.device,
        *,
        stage_mesh: Any = None,
        shard_kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.module = module
        self.split_points = split_points
        self._config = config
        self._device = device
        self._group = config.device_mesh["pp"].get_group()
        # Sharded stages (dp_shard): FSDP2 over stage_mesh reduces the gradients (HSDP with dp_replicate).
        self._stage_mesh = stage_mesh
        self._shard_kwargs = dict(shard_kwargs or {})
        # Whole pipelines side by side (dp_replicate): each stage averages its gradients with its replicas'.
        self._replicas = (
            config.device_mesh["dp_replicate"].get_group()
            if config.dp_replicate_enabled and stage_mesh is None
            else None
        )
        self._rank = dist.get_rank(self._group)
        self._size = int(config.pp_size)
        self._scale = 1.0  # the accumulation steps the loss is divided by (set per step)
        self._recorded: list[torch.Tensor] = []
        self._own_loss = False  # a transformers model without pp_loss_fn: its loss_function on the logits
        self._sending: Any = None  # the last stage's loss broadcast still in flight (see _from_last)
        self.schedule: Any = None
        self.stage_modules: list[nn.Module] = []
        self._view: list[nn.Module] = []
        self.shards = StageShards()  # the model's parameters -> the tensors this rank trains
        self._on_built: list[Callable[[StageShards], None]] = []
        self.released_bytes = 0  # the model's weights freed once cut (those of the other ranks' stages)

    # ------------------------------------------------------------------ building
    @property
    def holds_first_stage(self) -> bool:
        return self._rank == 0

    @property
    def holds_last_stage(self) -> bool:
        return self._rank == self._size - 1

    def stage_indices(self) -> list[int]:
        """The stages this rank holds: its ``pp`` coordinate, plus ``pp_size`` more per extra stage (interleaved)."""
        return [self._rank + k * self._size for k in range(stages_per_rank(self._config))]

    def when_built(self, callback: Callable[[StageShards], None]) -> None:
        """Calls ``callback(this rank's stage parameters)`` once the stages exist (now if they do)."""
        if self.schedule is not None:
            callback(self.shards)
        else:
            self._on_built.append(callback)

    @property
    def _has_loss(self) -> bool:
        return self._own_loss or self._config.pp_loss_fn is not None

    def _loss(self, output: Any, target: Any) -> torch.Tensor:
        if self._own_loss:
            vocab = getattr(getattr(self.module, "config", None), "vocab_size", None)
            loss_function: Any = getattr(self.module, "loss_function")  # noqa: B009 - typed Any on purpose
            value: torch.Tensor = loss_function(logits=_logits(output), labels=target, vocab_size=vocab)
        else:
            value = self._config.pp_loss_fn(output, target)
        self._recorded.append(value.detach())
        return value / self._scale if self._scale != 1 else value

    def _build(self, args: tuple[Any, ...], kwargs: dict[str, Any], rows: int) -> None:
        from torch.distributed.pipelining import schedules

        from accelerate.backends.pipeline.schedule import trace_pipeline

        chunk = rows // microbatches(self._config)
        # Copies: inputs that share storage (labels=input_ids, as transformers examples do) would be traced
        # as one input, and the stage reading the other would wait for a tensor never sent.
        example_args = tuple(a[:chunk].clone() if isinstance(a, torch.Tensor) else a for a in args)
        example_kwargs = {
            k: v[:chunk].clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()
        }
        tp_mesh = self._config.device_mesh["tp"] if self._config.tp_enabled else None
        originals = dict(self.module.named_parameters())  # the plan's DTensors under tp
        with plain_for_tracing(self.module) if tp_mesh is not None else contextlib.nullcontext():
            pipe = trace_pipeline(self.module, self.split_points, example_args, example_kwargs)
        stages = [pipe.build_stage(i, device=self._device, group=self._group) for i in self.stage_indices()]
        self.stage_modules = [stage.submod for stage in stages]
        for module in self.stage_modules:
            compose_stage(
                module, self.shards, originals, tp_mesh=tp_mesh, mesh=self._stage_mesh, **self._shard_kwargs
            )
        kind = getattr(schedules, f"Schedule{self._config.pp_schedule}")
        chunks = microbatches(self._config)
        first = stages if stages_per_rank(self._config) > 1 else stages[0]
        loss_fn = self._loss if self._has_loss else None
        # torch's scale_grads divides every gradient the stage holds after each step, so gradients kept
        # over accumulation steps would be divided again: the loss is divided instead (see _train_step).
        self.schedule = kind(first, n_microbatches=chunks, loss_fn=loss_fn, scale_grads=False)
        for callback in self._on_built:
            callback(self.shards)
        self._on_built.clear()
        # Only now: the optimizers were pointed at the stages (they find the model's parameters by
        # identity, which freeing keeps), and tracing needed the whole model.
        self.released_bytes = release_other_stages(self.module, self.stage_modules)
        guard_released(self.module)

    def trained_view(self) -> nn.Module:
        """The module whose parameters this rank's optimizers step, under the model's names: the model
        until it is cut, then its stages' (shards under ``dp_shard``, DTensors under ``tp``)."""
        if self.schedule is None:
            return self.module
        if not self._view:  # kept in a list: an attribute would register it as a submodule of this one
            self._view.append(named_view(self.stage_modules))
        return self._view[0]

    def own_state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors this rank trains, under the model's names (the whole model until it is cut)."""
        self.settle()
        if self.schedule is None:
            return dict(self.module.state_dict())
        return self._stage_state(lambda value: value)

    def _stage_state(self, convert: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        """This rank's stages' tensors under the model's keys (a stage also lists the model's
        non-persistent buffers, e.g. rotary ``inv_freq``: left out, as the model's state dict does)."""
        with internal_state_read():
            keys = self.module.state_dict().keys()
        return {
            k: convert(v) for stage in self.stage_modules for k, v in stage.state_dict().items() if k in keys
        }

    def gathered_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's state dict on every rank: each stage's tensors from the rank that holds it.

        Once cut, a rank holds only its own stages' tensors (the model's others are freed); the stage
        modules name their tensors as the model does, so the pieces merge into the model's own keys. A
        collective over the ``pp`` group once the stages exist (and over ``dp_shard`` for sharded stages).
        """
        self.settle()
        with internal_state_read():
            own = self.module.state_dict()
        if self.schedule is None:  # not cut yet: every rank holds the same, untrained weights
            return {k: v.detach().cpu() for k, v in own.items()}
        mine = self._stage_state(lambda value: full_tensor(value).detach().cpu())
        pieces: list[Any] = [None] * self._size
        dist.all_gather_object(pieces, mine, group=self._group)
        merged: dict[str, torch.Tensor] = {}
        for piece in pieces:
            merged.update(piece)
        whole: dict[str, torch.Tensor] = {}
        for key, value in own.items():  # the model's order; a tensor no stage holds: this rank's copy
            if key in merged:
                whole[key] = merged[key]
            elif not is_released(value):
                whole[key] = value.detach().cpu()
        return whole

    # ------------------------------------------------------------------ running
    def forward(self, *args: Any, labels: Any = None, **kwargs: Any) -> Any:
        self.settle()
        rows = _rows(args, kwargs)
        check_batch(self._config, rows)
        if self.schedule is None:
            # No loss function given, a model with its own (transformers' loss_function): the last stage
            # runs it on the logits, as the model's forward would with labels=.
            self._own_loss = self._config.pp_loss_fn is None and callable(
                getattr(self.module, "loss_function", None)
            )
            self._build(args, kwargs, rows)
        args = tuple(a.to(self._device) if isinstance(a, torch.Tensor) else a for a in args)
        # Keyword arguments that are not tensors (use_cache=False, ...) were fixed into the graph when traced.
        kwargs = {k: v.to(self._device) for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
        target = labels.to(self._device) if isinstance(labels, torch.Tensor) else labels
        if torch.is_grad_enabled():
            out = self._train_step(args, kwargs, target)
        else:
            out = self._evaluate(args, kwargs, target)
        return PipelineOutput(loss=out) if self._own_loss and labels is not None else out

    def _train_step(self, args: tuple[Any, ...], kwargs: dict[str, Any], target: Any) -> torch.Tensor:
        if not self._has_loss or target is None:
            raise ValueError(
                "A pipeline-parallel model trains inside its schedule, so the loss runs on the last stage: "
                "give the loss function once, ParallelismConfig(pp_loss_fn=loss_fn) with "
                "loss_fn(output, labels) -> loss, and call the model with the labels: "
                "loss = model(inputs, labels=labels); a model that computes its own loss from labels= "
                "(transformers) needs no pp_loss_fn: model(**batch, labels=labels).loss. Evaluate under "
                "torch.no_grad()."
            )
        from accelerate.state.gradient import GradientState

        # Equal micro-batches: the batch's mean loss is the mean of theirs, whose gradients the stages sum.
        self._scale = float(GradientState().num_steps * microbatches(self._config))
        self._recorded = []
        self._run(self.schedule.step, args, kwargs, target)
        if self._replicas is not None and GradientState().sync_gradients:
            self._average_over_replicas()
        loss = self._from_last(self._mean_recorded())
        # A tensor whose backward reaches no parameter: accelerator.backward(loss) (which divides it by
        # the accumulation steps first) finds the gradients already there.
        return loss + torch.zeros((), device=loss.device, requires_grad=True)

    def _average_over_replicas(self) -> None:
        """What DDP does at a synced backward, for this rank's stages: the replicas' mean gradient."""
        grads = [p.grad for stage in self.stage_modules for p in stage.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self._replicas)
        flat /= dist.get_world_size(self._replicas)
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def _evaluate(self, args: tuple[Any, ...], kwargs: dict[str, Any], target: Any) -> Any:
        self._recorded = []
        self._scale = 1.0
        with_loss = target is not None and self._has_loss
        if with_loss:
            output = self._run(self.schedule.eval, args, kwargs, target)
        else:  # no labels: forwards only, without the loss function (torch's eval would call it)
            loss_fn, self.schedule._loss_fn = self.schedule._loss_fn, None
            try:
                output = self._run(self.schedule.eval, args, kwargs, None)
            finally:
                self.schedule._loss_fn = loss_fn
        if with_loss:
            return self._from_last(self._mean_recorded())
        shared = [output.detach().cpu() if isinstance(output, torch.Tensor) else output]
        dist.broadcast_object_list(shared, group_src=self._size - 1, group=self._group)
        value = shared[0]
        return value.to(self._device) if isinstance(value, torch.Tensor) else value

    def _run(
        self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], target: Any
    ) -> Any:
        target = target if self.holds_last_stage else None
        if self.holds_first_stage:
            return call(*args, target=target, **kwargs)
        return call(target=target)

    def _mean_recorded(self) -> torch.Tensor:
        if not self._recorded:
            return torch.zeros((), device=self._device)
        return torch.stack(self._recorded).mean()

    def _from_last(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` of the last stage, on every rank of the ``pp`` group; ``value`` is a tensor this
        call alone holds (:meth:`_mean_recorded`'s), used as the broadcast's buffer.

        The last stage ends its backward first (1F1B and GPipe), so a blocking broadcast there would
        hold its optimizer step until the first stage ends too. Its own value is already the right
        one: it only starts the send and runs on (the send is awaited by :meth:`settle`, at the next
        call or state read, so that an error still surfaces). The other ranks wait for the value, which
        has usually arrived by the time they end their backward: what they return is final.
        """
        value = value.detach().to(self._device, torch.float32)
        if self.holds_last_stage:
            # The buffer being sent stays private (a copy is returned), so nothing the caller does
            # to the loss can change what the other ranks receive.
            self._sending = dist.broadcast(value, group_src=self._size - 1, group=self._group, async_op=True)
            return value.clone()
        dist.broadcast(value, group_src=self._size - 1, group=self._group)
        return value

    def settle(self) -> None:
        """Waits for the last stage's loss broadcast of the previous call, if it is still in flight."""
        sending, self._sending = self._sending, None
        if sending is not None:
            sending.wait()


class PipelineOutput(dict[str, Any]):
    """What a pipelined model that computes its own loss returns: ``out.loss`` (or ``out["loss"]``), the
    batch's mean loss on every rank; the logits stay on the last stage."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"A pipelined model's output holds only the loss ({sorted(self)}), not {name!r}: the other "
                "outputs stay on the last stage. Evaluate under torch.no_grad() without labels for them."
            ) from None


def _logits(output: Any) -> torch.Tensor:
    """The logits in the last stage's output (itself, its first value, or ``logits``)."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        return output["logits"]  # type: ignore[no-any-return]
    if isinstance(output, tuple | list):
        return output[0]  # type: ignore[no-any-return]
    return output.logits  # type: ignore[no-any-return]


def _rows(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    raise ValueError(
        "A pipeline-parallel model needs batch-first tensor inputs (the schedule cuts them into "
        "micro-batches along dimension 0); this call passed none."
    )


def clip_pipeline_grad_norm_(
    parameters: list[torch.Tensor], max_norm: float, norm_type: float, group: Any
) -> torch.Tensor:
    """Clips by the norm over every stage's gradients (each rank holds only its stage's) and returns it.

    Sharded (DTensor) gradients count by their mesh: one norm per (mesh, placements) group, gathered
    over that mesh, then the groups and the stages combined.
    """
    grads = [p.grad for p in parameters if p.grad is not None]
    device = grads[0].device if grads else torch.device("cpu")
    groups: dict[tuple[int, tuple[Any, ...]], list[torch.Tensor]] = {}
    for grad in grads:
        key = (id(getattr(grad, "device_mesh", None)), tuple(getattr(grad, "placements", ())))
        groups.setdefault(key, []).append(grad)
    parts = [full_tensor(torch.nn.utils.get_total_norm(g, norm_type)) for g in groups.values()]
    norms = (
        torch.stack([p.to(device, torch.float32) for p in parts]) if parts else torch.zeros(1, device=device)
    )
    if norm_type == float("inf"):
        total = norms.max()
        dist.all_reduce(total, op=dist.ReduceOp.MAX, group=group)
    else:
        total = norms.pow(norm_type).sum()
        dist.all_reduce(total, group=group)
        total = total ** (1.0 / norm_type)
    coef = min(1.0, max_norm / (float(total) + 1e-6))  # torch's clip_grad_norm_ formula
    if coef < 1.0:
        for grad in grads:
            grad.mul_(coef)
    return total
