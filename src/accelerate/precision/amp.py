"""`Precision`: everything mixed precision changes in a training step, in one object.

- ``autocast()``: the context the model's forward (and user code) runs under.
- fp8: the fp8 library's layer conversion (``precision/fp8``) and bf16 autocast for the rest of the
  model, as upstream runs it.
- fp16 only: a ``torch.amp.GradScaler`` that scales the loss in ``backward``, unscales gradients
  exactly once per optimizer step (before clipping or before the step), skips the step when they
  hold inf/nan, and records that it did so the scheduler can hold back too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from accelerate.utils.dataclasses import (
    AutocastKwargs,
    GradScalerKwargs,
    PrecisionType,
    check_mixed_precision,
    mixed_precision_dtype,
)
from accelerate.utils.fp32_outputs import convert_outputs_to_fp32
from accelerate.utils.modeling import ORIGINAL_FORWARD

if TYPE_CHECKING:
    from accelerate.precision.fp8.resolve import Fp8Setup


class Precision:
    """Mixed-precision behaviour for one device: ``mode`` is one of ``AVAILABLE_MIXED_PRECISION_MODES``."""

    def __init__(
        self,
        mode: str,
        device: torch.device,
        *,
        autocast_kwargs: AutocastKwargs | None = None,
        scaler_kwargs: GradScalerKwargs | None = None,
        fp8: Fp8Setup | None = None,
    ) -> None:
        self.mode = check_mixed_precision(mode, origin=f"Precision(mode={str(mode)!r})")
        self.device = device
        self.autocast_kwargs = autocast_kwargs or AutocastKwargs()
        self.fp8 = fp8
        # fp8 layers cast to float8 themselves; the rest of the model runs under bf16 autocast (upstream's choice).
        fp8_mode = self.mode == PrecisionType.FP8.value
        self.dtype: torch.dtype | None = torch.bfloat16 if fp8_mode else mixed_precision_dtype(self.mode)
        self.scaler: torch.amp.GradScaler | None = None
        if self.mode == PrecisionType.FP16.value:
            kwargs = (scaler_kwargs or GradScalerKwargs()).to_kwargs()
            self.scaler = torch.amp.GradScaler(device.type, **kwargs)
        self._unscaled: set[int] = set()  # optimizers unscaled and not yet stepped
        self._window: _Window | None = None  # set once an optimizer stepped since the last backward
        self.step_was_skipped = False

    @property
    def enabled(self) -> bool:
        return self.dtype is not None

    def autocast(
        self, autocast_handler: AutocastKwargs | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """The autocast context for this device and dtype (a null context without mixed precision)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        handler = autocast_handler or self.autocast_kwargs
        kwargs: dict[str, Any] = {"dtype": self.dtype, "enabled": handler.enabled}
        if handler.cache_enabled is not None:
            kwargs["cache_enabled"] = handler.cache_enabled
        return torch.autocast(device_type=self.device.type, **kwargs)

    def wrap_forward(self, model: torch.nn.Module) -> None:
        """Makes ``model.forward`` run under autocast and return fp32 outputs (idempotent)."""
        if self.dtype is None or getattr(model, ORIGINAL_FORWARD, None) is not None:
            return
        original = model.forward
        # torch.autocast objects are reusable (not re-entrant) context managers: one instance serves
        # every call and keeps its set-up cost off the training step.
        autocast = self.autocast()

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with autocast:
                return original(*args, **kwargs)

        setattr(model, ORIGINAL_FORWARD, original)
        model.forward = convert_outputs_to_fp32(forward)
        if self.fp8 is not None:
            self.fp8.wrap_forward(model)

    def convert_model(self, model: torch.nn.Module, *, sharded: bool = False) -> torch.nn.Module:
        """fp8: swaps in the fp8 library's layers (before any wrapper); other modes return ``model``.

        ``sharded``: FSDP2 will shard the model (torchao then all-gathers weights in float8).
        """
        return model if self.fp8 is None else self.fp8.convert_model(model, sharded=sharded)

    def prepare_jointly(self, objects: list[Any]) -> list[Any]:
        """fp8 with MS-AMP converts the model and optimizer of one ``prepare()`` call together."""
        return objects if self.fp8 is None else self.fp8.prepare_jointly(objects, self.device)

    def check_model(self, model: torch.nn.Module) -> None:
        """fp16 loss scaling cannot unscale fp16 gradients: catch that before training starts."""
        if self.scaler is None:
            return
        half = [name for name, p in model.named_parameters() if p.requires_grad and p.dtype == torch.float16]
        if half:
            raise ValueError(
                f"mixed_precision='fp16' keeps fp32 master weights and scales the loss, but the model's trainable "
                f"parameters are already fp16 ({', '.join(half[:3])}{', ...' if len(half) > 3 else ''}). "
                "Load the model in fp32 (e.g. model.float()) and let mixed_precision='fp16' cast the compute, "
                "or use mixed_precision='no' for a pure-fp16 model."
            )

    def register(self, optimizer: torch.optim.Optimizer) -> None:
        """Kept for the Accelerator's bookkeeping; the scale update needs no list of optimizers."""

    def forget_optimizers(self) -> None:
        self._unscaled.clear()
        self._window = None

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        if self.scaler is not None:
            # A new backward starts a new "window": the gradients it produces are scaled by the
            # scale as it is now, whatever optimizer steps and scale updates come after.
            self._window = None
            self.scaler.scale(loss).backward(**kwargs)
        else:
            loss.backward(**kwargs)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscales ``optimizer``'s gradients once per step (clipping and stepping both need it).

        Always by the scale its gradients were produced with: when another optimizer of the same
        backward has stepped (and updated the scale) first, that is the scale from before the update.
        """
        if self.scaler is None or id(optimizer) in self._unscaled:
            return
        current = self.scaler._scale
        if self._window is not None:
            self.scaler._scale = self._window.scale
        try:
            self.scaler.unscale_(optimizer)
        finally:
            self.scaler._scale = current
        self._unscaled.add(id(optimizer))

    def step(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        """Steps ``optimizer``; under fp16 skips it on inf/nan gradients and updates the loss scale.

        The scale reflects this step's outcome as soon as ``step`` returns (so a ``save_state`` right
        after it saves the right scale), and it changes at most once per backward, as one
        ``GradScaler.update()`` after all of that backward's optimizers would: the first optimizer to
        step updates it; a later one of the same backward only backs it off if it found inf/nan and
        nothing before it did (from the scale the gradients were produced with).
        """
        if self.scaler is None:
            self.step_was_skipped = False
            return optimizer.step(closure) if closure is not None else optimizer.step()
        self.unscale(optimizer)
        result = self.scaler.step(optimizer, closure) if closure is not None else self.scaler.step(optimizer)
        found = self.scaler._per_optimizer_states[id(optimizer)].get("found_inf_per_device", {})
        # One host sync: GradScaler skipped the step exactly when it found inf/nan gradients.
        self.step_was_skipped = bool(sum(v.item() for v in found.values()))
        self._unscaled.discard(id(optimizer))
        self._update_scale(self.step_was_skipped)
        return result

    def _update_scale(self, found_inf: bool) -> None:
        scaler = self.scaler
        if scaler is None or scaler._scale is None or scaler._growth_tracker is None:
            return
        scale, tracker = scaler._scale, scaler._growth_tracker
        # Optimizers already unscaled (clipping) but not yet stepped keep their record across the
        # update, which would otherwise forget it and make GradScaler.step unscale them twice.
        waiting = {key: state for key, state in scaler._per_optimizer_states.items() if key in self._unscaled}
        window = self._window
        if window is None:
            if waiting and not found_inf:
                # This update also reads the waiting optimizers' inf/nan records: count them in.
                found_inf = any(
                    bool(v.item())
                    for st in waiting.values()
                    for v in st.get("found_inf_per_device", {}).values()
                )
            self._window = _Window(scale.clone(), tracker.clone(), found_inf)
            scaler.update()
        elif found_inf and not window.found_inf:
            scale.copy_(window.scale)
            tracker.copy_(window.growth_tracker)
            window.found_inf = True
            scaler.update()  # back off once, from the scale this backward used
        else:
            scaler.update(new_scale=scale.clone())  # the window's update stands
        scaler._per_optimizer_states.update(waiting)


@dataclasses.dataclass
class _Window:
    """The loss scale state when a backward's first optimizer step updated it."""

    scale: torch.Tensor
    growth_tracker: torch.Tensor
    found_inf: bool
