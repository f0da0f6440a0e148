"""``prepare_pippy``: one call that splits a model over the processes and makes its forward pipelined."""

from __future__ import annotations

from typing import Any

from torch import nn

from accelerate.backends.pipeline.inputs import InputSignature
from accelerate.backends.pipeline.schedule import agree, build_pipeline, run_pipeline
from accelerate.backends.pipeline.split import resolve_split_points
from accelerate.state import PartialState
from accelerate.utils.imports import is_pippy_available

_LAUNCH_HINT = (
    "launch one process per stage, e.g. `accelerate launch --num_processes 2 script.py` (add --cpu on a "
    "machine without GPUs) or `torchrun --nproc_per_node 2 script.py`"
)


def _check_num_chunks(num_chunks: Any, num_processes: int) -> int:
    if num_chunks is None:
        return num_processes
    if isinstance(num_chunks, bool) or not isinstance(num_chunks, int) or num_chunks < 1:
        raise ValueError(
            f"num_chunks must be a positive int (micro-batches per batch) or None, got {num_chunks!r}"
        )
    return num_chunks


def _check_example(example_args: Any, example_kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args = tuple(example_args) if example_args is not None else ()
    if example_kwargs is not None and not isinstance(example_kwargs, dict):
        raise ValueError(f"example_kwargs must be a dict of the model's keyword inputs, got {type(example_kwargs).__name__}")  # fmt: skip
    kwargs = dict(example_kwargs or {})
    if not args and not kwargs:
        raise ValueError(
            "prepare_pippy needs example inputs to trace the model: pass example_args=(micro_batch,) (or "
            "example_kwargs={'input_ids': micro_batch, ...}): one micro-batch, a call's batch being num_chunks "
            "of them."
        )
    return args, kwargs


def _restore_forward(model: nn.Module) -> None:
    """Undoes an earlier ``prepare_pippy``, so the model is traced through its own forward again."""
    attributes = model.__dict__
    if "_original_forward" not in attributes:
        return
    if attributes.pop("_pippy_forward_was_instance_attribute", False):
        attributes["forward"] = attributes["_original_forward"]
    else:
        attributes.pop("forward", None)
    for name in ("_original_forward", "_original_call", "pippy_stage", "hf_split_points"):
        attributes.pop(name, None)


def _install(model: nn.Module, schedule: Any, split_points: list[str], num_chunks: int, gather_output: bool, signature: InputSignature) -> None:  # fmt: skip
    """Makes ``model.forward`` the pipelined forward, keeping what upstream keeps on the model."""
    original = model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        return run_pipeline(schedule.step, num_chunks, gather_output, args, kwargs, signature=signature)

    forward.__wrapped__ = original  # type: ignore[attr-defined]  # inspect.signature shows the model's inputs
    # Plain attributes (none is a Module, Parameter or buffer), as upstream names them.
    model.__dict__.update(
        _pippy_forward_was_instance_attribute="forward" in model.__dict__,
        _original_forward=original,
        _original_call=model.__call__,
        pippy_stage=schedule,
        hf_split_points=split_points,
        forward=forward,
    )


def prepare_pippy(
    model: nn.Module,
    split_points: str | list[str] | None = "auto",
    no_split_module_classes: list[str] | None = None,
    example_args: tuple[Any, ...] | None = (),
    example_kwargs: dict[str, Any] | None = None,
    num_chunks: int | None = None,
    gather_output: bool | None = False,
) -> nn.Module:
    """Splits ``model`` into one pipeline stage per process and makes its forward run the pipeline.

    Call it on every process with the same arguments. As upstream, the example is ONE micro-batch:
    afterwards ``model(*inputs)`` (also on every process) runs a batch of up to ``num_chunks`` such
    micro-batches through the stages (e.g. an example of 2 rows, 2 processes: batches of 4 rows in 2
    micro-batches). The first process's inputs are used; a shorter batch is padded with zero rows
    and the padding dropped from the output (upstream returns the padded rows). The last process
    returns the output (the others None, unless ``gather_output``). The output is what the last stage computes, flattened by torch's tracer: one
    tensor, or a tuple of the tensors the model returns (a transformers ``ModelOutput`` comes back as
    its tensors, e.g. the logits alone). The model object is returned with its attributes
    (``config``, ...) intact, plus ``hf_split_points`` and ``pippy_stage`` (the schedule).

    Args:
        model: the model; put it in eval mode first for inference (tracing records dropout otherwise).
        split_points: ``"auto"`` for a split balanced by parameter size, or the names of the modules
            that begin stages 1, 2, ... (one fewer than the processes).
        no_split_module_classes: class names ``"auto"`` keeps within one stage (e.g. ``["GPT2Block"]``).
        example_args: positional inputs of ONE micro-batch (batch-first tensors), shaped like the calls'.
        example_kwargs: keyword inputs likewise; non-tensor ones (``use_cache=False``) are fixed by tracing.
        num_chunks: micro-batches per batch (default: the number of processes).
        gather_output: send the output from the last process to every process.

    Raises:
        ImportError: torch is older than 2.4 (no ``torch.distributed.pipelining``).
        ValueError: not a run of two or more processes; bad split points, num_chunks or example; the
            processes were given different arguments (raised on every process, never a hang).
        RuntimeError: the model cannot be traced or split (on every process).

    Example:
        >>> model = prepare_pippy(model.eval(), example_args=(torch.randint(0, 100, (2, 16)),))
        >>> with torch.no_grad():
        ...     logits = model(batch)  # batch: up to 2 x num_processes rows; logits on the last process
    """
    if not is_pippy_available():
        raise ImportError(
            "prepare_pippy uses torch.distributed.pipelining, which needs torch >= 2.4 built with "
            "distributed support: `pip install -U 'torch>=2.4'`."
        )
    state = PartialState()
    if state.num_processes < 2:
        raise ValueError(
            f"prepare_pippy splits the model over the processes of a distributed run, and this run has "
            f"{state.num_processes}: {_LAUNCH_HINT}."
        )
    _restore_forward(model)
    error: Exception | None = None
    plan: tuple[list[str], int, InputSignature] | None = None
    try:
        chunks = _check_num_chunks(num_chunks, state.num_processes)
        args, kwargs = _check_example(example_args, example_kwargs)
        points = resolve_split_points(model, split_points, state.num_processes, no_split_module_classes)
        plan = (points, chunks, InputSignature.of(args, kwargs, chunks))
    except (TypeError, ValueError) as exc:
        error = exc
    # Every process learns whether any failed, and what every process planned: a mistake on one
    # rank, or ranks that disagree, must stop all of them here rather than hang the first forward.
    plans = agree(error, what="prepare_pippy", error_type=ValueError, payload=plan)
    if any(other != plans[0] for other in plans):
        listed = "; ".join(
            f"rank {rank}: split_points={p[0]}, num_chunks={p[1]}, example={p[2]}"
            for rank, p in enumerate(plans)
        )
        raise ValueError(
            f"prepare_pippy was called differently on the processes ({listed}). Every process must pass "
            "the same model, split_points, num_chunks and example shapes."
        )
    points, chunks, signature = plans[state.process_index]  # no rank failed, and all planned alike
    schedule: Any = None
    try:
        schedule = build_pipeline(model, points, args, kwargs, chunks)
    except Exception as exc:  # noqa: BLE001 - any failure must reach every rank, or the others hang later
        error = exc
    agree(error, what="Building the pipeline stages", error_type=RuntimeError, exchange=False)
    _install(model, schedule, points, chunks, bool(gather_output), signature)
    return model
