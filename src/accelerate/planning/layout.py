"""A training run's layout as the memory estimate sees it: the parallel sizes and the training choices.

:class:`RunLayout` names the same sizes as ``ParallelismConfig`` (dp_replicate, dp_shard, tp, cp),
plus how the data-parallel shards split the training state (none, ZeRO stages 1 and 2, or FSDP /
ZeRO-3), CPU offload, precision, optimizer, micro-batch, sequence length and activation
checkpointing. Pure data, no torch.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from accelerate.utils.dataclasses import MIXED_PRECISION_MODES

OPTIMIZERS = ("adamw", "adam", "sgd", "sgd_momentum", "adam8bit")
# Optimizer state bytes per trainable parameter: Adam keeps two fp32 moments, 8-bit Adam two bytes
# (one each, plus a block scale that is a rounding error), SGD with momentum one fp32 buffer.
OPTIMIZER_STATE_BYTES = {"adamw": 8.0, "adam": 8.0, "sgd": 0.0, "sgd_momentum": 4.0, "adam8bit": 2.0}
# The modes the estimate models: every mixed-precision mode (fp8 is counted as bf16, with a note).
PRECISIONS = MIXED_PRECISION_MODES
# Sharding of the training state over the dp_shard group, as DeepSpeed numbers it: 0 none, 1 the
# optimizer states, 2 those and the gradients, 3 those and the parameters (what FSDP does).
ZERO_STAGES = (0, 1, 2, 3)
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgtp]?i?b?)\s*$", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
         "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}  # fmt: skip


def parse_memory(text: str | int) -> int:
    """Bytes in ``text``: ``"80GB"`` (10**9 bytes a GB, as GPU makers count), ``"80GiB"`` (2**30), or a number.

    Example:
        >>> parse_memory("80GB"), parse_memory("1.5GiB"), parse_memory(1024)
        (80000000000, 1610612736, 1024)
    """
    if isinstance(text, int):
        return text
    match = _SIZE.match(text)
    if match is None or match.group(2).lower() not in _UNIT:
        raise ValueError(f"max_memory={text!r} is not a size; write it like 80GB, 80GiB or 85899345920.")
    return int(float(match.group(1)) * _UNIT[match.group(2).lower()])


@dataclass(frozen=True)
class RunLayout:
    """One training run's parallel layout and training choices (see the module docstring).

    ``dp_shard=None`` takes the processes the other sizes leave, as ``ParallelismConfig`` does; a
    ``zero_stage`` of 0 with ``dp_shard > 1`` means FSDP (stage 3), which is what ``dp_shard`` runs.

    Example:
        >>> RunLayout(world_size=16, tp=2).resolved().dp_shard
        8
    """

    world_size: int = 1
    dp_replicate: int = 1
    dp_shard: int | None = None
    tp: int = 1
    cp: int = 1
    zero_stage: int = 0
    cpu_offload: bool = False
    mixed_precision: str = "no"
    optimizer: str = "adamw"
    micro_batch_size: int = 1
    sequence_length: int = 1024
    activation_checkpointing: bool = False

    def resolved(self) -> RunLayout:
        """The layout with ``dp_shard`` filled in and every value checked.

        Raises:
            ValueError: a size below 1, sizes that do not multiply to the world size, or an unknown
                optimizer, precision or stage, naming the field and what it may be.
        """
        for name in ("world_size", "dp_replicate", "tp", "cp", "micro_batch_size", "sequence_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"RunLayout({name}={getattr(self, name)}) must be at least 1.")
        others = self.dp_replicate * self.tp * self.cp
        shard = self.dp_shard
        if shard is None:
            if self.world_size % others:
                raise ValueError(
                    f"RunLayout: dp_replicate={self.dp_replicate} x tp={self.tp} x cp={self.cp} = {others} does "
                    f"not divide world_size={self.world_size}; pick sizes whose product divides it."
                )
            shard = self.world_size // others
        if shard < 1 or others * shard != self.world_size:
            raise ValueError(
                f"RunLayout: dp_replicate={self.dp_replicate} x dp_shard={shard} x tp={self.tp} x cp={self.cp} = "
                f"{others * shard}, but world_size={self.world_size}; their product must be the world size."
            )
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(
                f"RunLayout(optimizer={self.optimizer!r}) must be one of {', '.join(OPTIMIZERS)}."
            )
        if self.mixed_precision not in PRECISIONS:
            raise ValueError(
                f"RunLayout(mixed_precision={self.mixed_precision!r}) must be one of {', '.join(PRECISIONS)}."
            )
        if self.zero_stage not in ZERO_STAGES:
            raise ValueError(f"RunLayout(zero_stage={self.zero_stage}) must be 0, 1, 2 or 3.")
        stage = 3 if self.zero_stage == 0 and shard > 1 else self.zero_stage
        return dataclasses.replace(self, dp_shard=shard, zero_stage=stage)

    @property
    def shard_group(self) -> int:
        """How many ranks split the training state: FSDP shards over dp_shard x cp (``dp_shard_cp``)."""
        return int(self.dp_shard or 1) * self.cp

    @property
    def data_parallel(self) -> int:
        return self.dp_replicate * int(self.dp_shard or 1)

    def describe(self) -> str:
        """``dp_replicate=2 x dp_shard=4 x tp=2 (FSDP)``: the sizes above 1 and the sharding."""
        sizes = [
            f"{n}={getattr(self, n)}"
            for n in ("dp_replicate", "dp_shard", "cp", "tp")
            if getattr(self, n) != 1
        ]
        sharding = {0: "", 1: " (ZeRO-1)", 2: " (ZeRO-2)", 3: " (FSDP/ZeRO-3)"}[self.zero_stage]
        offload = " + CPU offload" if self.cpu_offload else ""
        return (" x ".join(sizes) or "one process") + sharding + offload
