"""Sequence parallelism's data and loss: each rank's slice of a batch, and the loss of the whole sequence.

Every rank of an ``sp`` group reads the same batches (the loader shards by the data-parallel
coordinate). :class:`SequenceSlicer` then keeps this rank's ``seq / sp`` tokens of each:

- labels are shifted *before* slicing (``shift_labels``: the next token, ``-100`` after the last), so
  the target of a slice's last token is the first token of the next slice, and the model is told
  not to shift again (transformers' causal-LM loss takes ``shift_labels=``);
- ``position_ids`` are the slice's global positions (rotary embeddings see where the tokens are);
- ``num_items_in_batch`` is the number of real (not ``-100``) targets of the *whole* sequence, so each
  rank's loss is its slice's sum over the whole sequence's count;
- an ``attention_mask`` is dropped when its padding is on the right (sequences of different lengths
  padded at the end, labels ``-100`` there): causal attention never lets a real token read a later
  pad. Padding before real tokens (left padding) is refused.

:func:`whole_sequence_loss` (a forward hook on the prepared model) makes the loss the model returns
the whole sequence's: its value is the sum over the sp group, and its gradient is ``sp`` times the
slice's, because FSDP2 averages gradients over the sp ranks where they must be summed.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import torch
import torch.distributed as dist

IGNORE_INDEX = -100


class SequenceSlicer:
    """Turns a batch into this rank's slice of it (a prepared loader's per-batch transform).

    Args:
        rank: this process's coordinate on the ``sp`` dimension.
        size: the ``sp`` size.
    """

    def __init__(self, rank: int, size: int) -> None:
        self.rank = rank
        self.size = size

    def __call__(self, batch: Any) -> Any:
        if not isinstance(batch, Mapping) or "input_ids" not in batch:
            raise TypeError(
                f"ParallelismConfig(sp_size={self.size}) slices each batch's sequence, which needs dict batches "
                f"with 'input_ids' (and optionally 'labels', 'position_ids'); this loader yields "
                f"{type(batch).__name__}{' without input_ids' if isinstance(batch, Mapping) else ''}."
            )
        ids = batch["input_ids"]
        rows, length = int(ids.shape[0]), int(ids.shape[1])
        if length % self.size:
            raise ValueError(
                f"ParallelismConfig(sp_size={self.size}) splits each sequence into {self.size} equal slices, but this "
                f"batch's sequence length is {length} (not divisible by {self.size}). Pad sequences to a multiple "
                f"of {self.size} (labels -100 on the padding), e.g. pad_to_multiple_of={self.size} in the collator."
            )
        mask = batch.get("attention_mask")
        if mask is not None and not _right_padded(mask):
            raise ValueError(
                f"ParallelismConfig(sp_size={self.size}): this batch's attention_mask has padding before real "
                "tokens (left padding, or gaps), which sequence-parallel attention cannot apply (each rank sees "
                "only its slice of the mask, and attention runs causally over the whole sequence). Pad on the "
                "right (padding_side='right', labels -100 on the padding), or pack sequences without padding."
            )
        width = length // self.size
        part = slice(self.rank * width, (self.rank + 1) * width)
        out: dict[str, Any] = {}
        for name, value in batch.items():
            if name in ("attention_mask", "labels", "shift_labels"):
                # The mask is dropped: with padding only on the right, causal attention over the whole
                # sequence never lets a real token read a pad (the pads' own outputs differ, but their
                # targets are -100 and the last real token's target is the first pad's label).
                continue
            per_token = (
                isinstance(value, torch.Tensor)
                and value.dim() >= 2
                and tuple(value.shape[:2]) == (rows, length)
            )
            out[name] = value[:, part].contiguous() if per_token else value
        if "position_ids" not in batch:
            out["position_ids"] = (
                torch.arange(length, device=ids.device).expand(rows, length)[:, part].contiguous()
            )
        shifted = batch.get("shift_labels")
        labels = batch.get("labels")
        if shifted is None and labels is not None:
            ignore = torch.full((rows, 1), IGNORE_INDEX, dtype=labels.dtype, device=labels.device)
            shifted = torch.cat([labels[:, 1:], ignore], dim=1)
        if shifted is not None:
            out["shift_labels"] = shifted[:, part].contiguous()
            # transformers computes a loss only when labels are given; with shift_labels it reads only those.
            out["labels"] = out["shift_labels"]
            out.setdefault("num_items_in_batch", (shifted != IGNORE_INDEX).sum())
        return out


def _right_padded(mask: torch.Tensor) -> bool:
    """Whether every row of a ``(rows, seq)`` mask is ones then zeros (padding only at the end)."""
    flags = mask.to(torch.bool)
    if bool(flags.all()):
        return True
    # Non-increasing along the sequence: no real token after a pad.
    return not bool((flags[:, 1:] & ~flags[:, :-1]).any())


def whole_sequence_loss(
    module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any, *, group: Any
) -> Any:
    """Forward hook: the model's loss (this slice's sum over the whole sequence's target count) becomes
    the whole sequence's loss in value, with ``sp`` times the slice's gradient.

    Only for batches :class:`SequenceSlicer` made (they carry ``shift_labels``); anything else passes.
    """
    # transformers' ModelOutput is both; a model of one's own may return either.
    loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss", None)
    if not isinstance(loss, torch.Tensor) or "shift_labels" not in kwargs:
        return output
    n = dist.get_world_size(group)
    total = loss.detach().clone()
    dist.all_reduce(total, group=group)  # the slices' sums over the same count: the whole sequence's mean
    # FSDP2 averages gradients over the sp ranks (it shards over them like data-parallel ranks), but
    # the slices' gradients add up to the sequence's: scale by n so the average is that sum.
    whole = loss * n + (total - loss.detach() * n)
    if isinstance(output, MutableMapping):
        output["loss"] = whole  # ModelOutput keeps its attribute and its key in step
    else:
        output.loss = whole
    return output


def apply_sequence_parallel(model: torch.nn.Module, config: Any) -> None:
    """Step 1b: Ulysses attention on the ``sp`` group and the whole-sequence loss hook, before FSDP2."""
    import functools

    from accelerate.backends.parallel.ulysses import apply_ulysses

    if getattr(model, "accepts_loss_kwargs", True) is False:
        # Its loss would be each slice's own mean, and the sum of those is not the sequence's mean.
        raise ValueError(
            f"ParallelismConfig(sp_size={config.sp_size}) needs the model's loss to divide by the whole "
            f"sequence's target count (num_items_in_batch), but {type(model).__name__}.accepts_loss_kwargs is "
            "False. Use a model whose loss takes num_items_in_batch (transformers' causal LMs do), or leave "
            "sp_size unset."
        )
    if _called_by_transformers_trainer():
        # Its sequence-parallel code is written for DeepSpeed's Ulysses loader (each process reads
        # its own samples and the group works through all of them): it divides num_items_in_batch by
        # sp_size, scales the loss by the process count and counts sp_size times more batches. Under
        # our loader that trains on a loss sp_size**2 too large: refuse rather than train wrong.
        raise NotImplementedError(
            f"transformers' Trainer with ParallelismConfig(sp_size={config.sp_size}, "
            f"sp_backend={config.sp_backend!r}) is not supported: Trainer's sequence-parallel code assumes "
            "DeepSpeed's Ulysses loader and would train on a loss sp_size**2 times too large with this one. "
            "Use sp_backend='deepspeed' with a DeepSpeed config, or write the loop with Accelerator "
            "(see docs/how-to/nd-parallelism.md)."
        )
    group = config.device_mesh["sp"].get_group()
    apply_ulysses(model, group)
    model.register_forward_hook(functools.partial(whole_sequence_loss, group=group), with_kwargs=True)


def _called_by_transformers_trainer() -> bool:
    """Whether ``prepare`` was called from transformers' Trainer (a frame of ``transformers.trainer``)."""
    import sys
    import types

    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "transformers.trainer":
            return True
        frame = frame.f_back
    return False
