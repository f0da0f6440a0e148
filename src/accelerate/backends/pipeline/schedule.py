"""Building the pipeline (trace, split, this process's stage, GPipe schedule) and running it.

Every process holds the whole model; :func:`build_pipeline` traces it once with torch's tracer
(``torch.distributed.pipelining.pipeline``), cuts it at the split points and keeps the stage whose
index is this process's rank, on this process's device. Running it (:func:`pippy_forward`): the
first process feeds the batch, which the GPipe schedule cuts into ``num_chunks`` micro-batches that
flow through the stages, and the last process receives the output. Before any process starts the
schedule, all of them agree that the first one's inputs are usable, so a bad batch raises the same
error everywhere instead of leaving the later stages waiting for activations that never come.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from accelerate.backends.pipeline.inputs import (
    InputSignature,
    TensorSpec,
    check_divisible,
    describe,
    drop_padding,
)
from accelerate.collectives.agreement import agree_on_failure, agree_on_outcome
from accelerate.collectives.communicator import current_communicator
from accelerate.collectives.operations import broadcast, broadcast_object_list
from accelerate.state import PartialState
from accelerate.utils.tree import recursively_apply, send_to_device


def agree(
    error: Exception | None,
    *,
    what: str,
    error_type: type[Exception],
    payload: Any = None,
    exchange: bool = True,
) -> list[Any]:
    """Every process's ``payload``, or an error on every process when any of them passes one.

    The process that failed raises its own exception, unchanged; the others raise ``error_type``
    naming it and its message. ``exchange=False`` skips the payloads: one small all-reduce when all
    went well (the pipelined forward pays it on every batch).
    """
    failure: Exception | None = None
    payloads: list[Any] = []
    try:
        if exchange:
            payloads = agree_on_failure(error, what=what, payload=payload, error_type=error_type)
        else:
            agree_on_outcome(error, what=what, error_type=error_type)
    except Exception as agreed:  # noqa: BLE001 - re-raised below, as this process's own error if it has one
        failure = agreed
    if failure is not None:
        raise error if error is not None else failure
    return payloads


def _model_device(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


@contextmanager
def _split_markers_removed_after(model: nn.Module, split_points: list[str]) -> Iterator[None]:
    """Gives the split modules their own forward back once torch's tracer is done with them.

    To mark a split, torch replaces the module's ``forward`` in place (keeping it as ``_orig_forward``)
    and leaves it so: the user's model would keep the markers, and a second ``prepare_pippy`` would
    find the old split points still in it.
    """
    modules = dict(model.named_modules())
    own = {point: "forward" in modules[point].__dict__ for point in split_points}
    try:
        yield
    finally:
        for point, had_own_forward in own.items():
            attributes = modules[point].__dict__
            if "_orig_forward" not in attributes:
                continue
            original = attributes.pop("_orig_forward")
            if had_own_forward:
                attributes["forward"] = original
            else:
                attributes.pop("forward", None)


def _no_grad_wrapper(forward: Any) -> Any:
    """The function under ``forward`` when it is ``torch.no_grad()``'s decorator (else None)."""
    code = getattr(forward, "__code__", None)
    inner = getattr(forward, "__wrapped__", None)
    if inner is None or code is None or not code.co_filename.endswith(("_contextlib.py", "grad_mode.py")):
        return None
    return inner


@contextmanager
def _no_grad_forwards_lifted(model: nn.Module) -> Iterator[None]:
    """Runs modules whose forward is decorated with ``@torch.no_grad()`` without it while tracing.

    torch's tracer records such a forward as a ``set_grad_enabled`` region that the pipeline's stage
    modules cannot run (its inputs go missing: "Expected positional argument ..."); transformers'
    rotary embeddings are written so. They compute from buffers and positions, which need no
    gradient, so the traced graph is the same without the decorator.
    """
    lifted: list[nn.Module] = []
    try:
        for module in model.modules():
            inner = _no_grad_wrapper(type(module).forward)
            if inner is not None and "forward" not in module.__dict__:
                module.forward = types.MethodType(inner, module)
                lifted.append(module)
        yield
    finally:
        for module in lifted:
            module.__dict__.pop("forward", None)


def trace_pipeline(
    model: nn.Module, split_points: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Traces ``model`` on one micro-batch and cuts it before each of ``split_points``: torch's ``Pipe``.

    The stages share the model's parameter objects under their own names, so an optimizer built over
    ``model.parameters()`` already holds them (pipeline training relies on this).

    Raises:
        ValueError: the split gives a number of stages other than ``len(split_points) + 1``.
        RuntimeError: torch's tracer cannot capture the model (the message says what usually helps).
    """
    from torch.distributed.pipelining import SplitPoint, pipeline

    try:
        with _split_markers_removed_after(model, split_points), _no_grad_forwards_lifted(model):
            pipe = pipeline(
                model,
                mb_args=args,
                mb_kwargs=kwargs,
                split_spec={point: SplitPoint.BEGINNING for point in split_points},
            )
    except Exception as exc:  # noqa: BLE001 - the tracer raises many types; each gets the same advice
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RuntimeError(
            f"torch.distributed.pipelining could not trace {type(model).__name__} with the example inputs "
            f"({type(exc).__name__}: {first_line}). The whole forward must be capturable by torch.export: "
            "pass example inputs the model really runs with, avoid data-dependent control flow, and for "
            "transformers models turn the KV cache off (example_kwargs={'use_cache': False} or "
            "model.config.use_cache = False)."
        ) from exc
    if pipe.num_stages != len(split_points) + 1:
        raise ValueError(
            f"Splitting at {split_points} gave {pipe.num_stages} stages, not {len(split_points) + 1}: a split "
            "point must be a module that forward calls, at most once, outside any loop over calls of it. "
            "Choose other modules (e.g. the decoder layers) or split_points='auto'."
        )
    return pipe


def build_pipeline(model: nn.Module, split_points: list[str], args: Any, kwargs: Any, num_chunks: int) -> Any:
    """Traces ``model``, splits it before each of ``split_points`` and returns this process's schedule.

    Args:
        model: the whole model (each process holds it; only this process's stage runs here).
        split_points: module names; stage ``i + 1`` begins at ``split_points[i]``.
        args: example positional inputs: ONE micro-batch (as upstream); a batch is ``num_chunks`` of them.
        kwargs: example keyword inputs (or None).
        num_chunks: micro-batches per batch.

    Returns:
        A ``torch.distributed.pipelining.ScheduleGPipe`` whose ``step`` runs one batch: call
        ``step(*inputs)`` on the first process and ``step()`` on the others.

    Raises:
        ValueError: the split gives a number of stages other than the number of processes.
        RuntimeError: torch's tracer cannot capture the model (the message says what usually helps).
    """
    from torch.distributed.pipelining import ScheduleGPipe

    state = PartialState()
    device = _model_device(model)
    pipe = trace_pipeline(
        model,
        split_points,
        send_to_device(tuple(args or ()), device),
        send_to_device(dict(kwargs or {}), device),
    )
    stage = pipe.build_stage(state.process_index, device=state.device)
    return ScheduleGPipe(stage, n_microbatches=num_chunks)


def _broadcast_from_last(output: Any, state: PartialState) -> Any:
    """The last process's output, sent to every process (tensors arrive on the collectives' device)."""
    last = state.num_processes - 1
    is_last = state.process_index == last
    shape = [describe(output) if is_last else None]
    broadcast_object_list(shape, from_process=last)
    device = current_communicator().device
    leaves: list[torch.Tensor] = []
    if is_last:
        output = recursively_apply(lambda t: t.detach().to(device).contiguous(), output)
        recursively_apply(leaves.append, output)
    else:

        def _empty(spec: TensorSpec) -> torch.Tensor:
            tensor = torch.empty(spec.shape, dtype=spec.dtype, device=device)
            leaves.append(tensor)
            return tensor

        output = recursively_apply(_empty, shape[0], test_type=lambda x: isinstance(x, TensorSpec))
    if leaves:
        broadcast(leaves, from_process=last)  # fills the receivers' tensors, which `output` holds
    return output


def run_pipeline(
    forward: Callable[..., Any],
    num_chunks: int,
    gather_output: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    signature: InputSignature | None = None,
) -> Any:
    """:func:`pippy_forward`, with the ``signature`` of the example the pipeline was traced with: the
    first process checks each call against it (``ValueError`` for inputs the pipeline cannot run) and
    pads a short batch to ``num_chunks`` micro-batches; the padding is dropped from the output."""
    state = PartialState()
    if state.num_processes == 1:
        return forward(*args, **kwargs)
    first = state.process_index == 0
    error: Exception | None = None
    rows = 0
    if first:
        try:
            if signature is not None:
                args, kwargs, found = signature.feed(args, kwargs)
                rows = found or 0
            else:
                check_divisible(args, kwargs, num_chunks, "This batch")
            args = send_to_device(tuple(args), state.device)
            kwargs = send_to_device(dict(kwargs), state.device)
        except ValueError as exc:
            error = exc
    # One small all-reduce: the later stages learn whether a batch is coming before waiting for it.
    agree(error, what="The pipelined forward", error_type=ValueError, exchange=False)
    full = signature.full_batch if signature is not None else None
    if full is not None:
        # The last stage computes the padded batch: it learns how many of its rows are real.
        count = torch.tensor([rows], dtype=torch.int64, device=current_communicator().device)
        broadcast(count, from_process=0)
        rows = int(count.item())
    output = None
    if first:
        forward(*args, **kwargs)
    elif state.is_last_process:
        output = forward()
    else:
        forward()
    if full is not None and 0 < rows < full and state.is_last_process:
        output = drop_padding(output, rows, full)
    if gather_output:
        output = _broadcast_from_last(output, state)
    return output


def pippy_forward(forward: Callable[..., Any], num_chunks: int, gather_output: bool, *args: Any, **kwargs: Any) -> Any:  # fmt: skip
    """Runs one batch through a pipeline schedule's ``forward`` (its ``step``) on every process.

    The first process's ``args``/``kwargs`` are the batch (the others' are ignored); the last process
    returns the output, the others None, or every process the output when ``gather_output``.

    Raises:
        ValueError: on every process, when the batch size is not a multiple of ``num_chunks``.
    """
    return run_pipeline(forward, num_chunks, gather_output, args, kwargs)
