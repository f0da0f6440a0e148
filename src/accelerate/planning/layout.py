"""A training run's layout as the memory estimate sees it: the parallel sizes and the training choices.

:class:`RunLayout` names the same sizes as ``ParallelismConfig`` (dp_replicate, dp_shard, pp, cp,
sp, tp, and ep, carved from dp_shard) and its pipeline schedule, plus how the data-parallel shards split the training state (none,
DeepSpeed's ZeRO stages 1-3, or FSDP) and DeepSpeed's bucket size, CPU offload, precision, optimizer,
micro-batch, sequence length and activation checkpointing. Pure data, no torch.
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
ENGINES = ("fsdp", "deepspeed")
# DeepSpeed's default reduce_bucket_size (elements): ZeRO allocates a gradient bucket this big whatever
# the model's size (accelerate fills a transformers model's "auto" with hidden_size**2 instead).
DEEPSPEED_BUCKET = 500_000_000
# torch.distributed.pipelining's schedules (ParallelismConfig.pp_schedule): the names of
# state/pipeline_options.PIPELINE_SCHEDULES, which imports torch with its package (tests/planning/test_stages.py
# keeps the two equal).
PIPELINE_SCHEDULES = ("GPipe", "1F1B", "Interleaved1F1B")
# The mesh's dimensions, outermost first, as ParallelismConfig orders them.
DIMS = ("dp_replicate", "dp_shard", "pp", "cp", "sp", "tp")
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
    ``zero_stage`` of 0 with ``dp_shard > 1`` means FSDP (stage 3), which is what ``dp_shard`` runs, and
    a ``zero_stage`` given means DeepSpeed (``engine`` says which when left ``None``).
    ``micro_batch_size`` is the samples of one forward pass; under pipeline parallelism (``pp > 1``) a
    step runs ``pp_microbatches`` of them (default: ``pp``) through the ``pp_schedule``.

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
    pp: int = 1
    sp: int = 1
    pp_schedule: str = "1F1B"
    pp_microbatches: int | None = None
    engine: str | None = None
    zero_bucket_size: int = DEEPSPEED_BUCKET
    ep: int = 1  # expert parallelism, carved from dp_shard (no rank of its own): experts split ep ways

    def resolved(self) -> RunLayout:
        """The layout with ``dp_shard`` filled in and every value checked.

        Raises:
            ValueError: a size below 1, sizes that do not multiply to the world size, or an unknown
                optimizer, precision or stage, naming the field and what it may be.
        """
        for name in (
            "world_size",
            "dp_replicate",
            "tp",
            "cp",
            "pp",
            "sp",
            "micro_batch_size",
            "sequence_length",
            "ep",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"RunLayout({name}={getattr(self, name)}) must be at least 1.")
        self._check_combinations()
        others = self.dp_replicate * self.tp * self.cp * self.pp * self.sp
        shard = self.dp_shard
        if shard is None:
            if self.world_size % others:
                raise ValueError(
                    f"RunLayout: {self._others_text()} = {others} does not divide "
                    f"world_size={self.world_size}; pick sizes whose product divides it."
                )
            shard = self.world_size // others
        if shard < 1 or others * shard != self.world_size:
            raise ValueError(
                f"RunLayout: dp_shard={shard} x {self._others_text()} = {others * shard}, but "
                f"world_size={self.world_size}; their product must be the world size."
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
        engine = self.engine or ("deepspeed" if self.zero_stage else "fsdp")
        if engine not in ENGINES:
            raise ValueError(f"RunLayout(engine={self.engine!r}) must be 'fsdp', 'deepspeed' or None.")
        stage = 3 if self.zero_stage == 0 and shard > 1 else self.zero_stage
        if self.ep > 1:
            self._check_experts(shard, stage, engine)
        return dataclasses.replace(self, dp_shard=shard, zero_stage=stage, engine=engine)

    def _check_experts(self, shard: int, stage: int, engine: str) -> None:
        """What ``ParallelismConfig`` refuses of ``ep_size`` (with the same fixes), and ep under DeepSpeed."""
        others = [f"{n}={getattr(self, n)}" for n in ("tp", "cp", "sp", "pp") if getattr(self, n) > 1]
        if others:
            raise ValueError(
                f"RunLayout(ep={self.ep}, {', '.join(others)}): expert parallelism composes with dp_shard and "
                "dp_replicate only (ParallelismConfig refuses the rest); give those ranks to dp_shard, which ep "
                "is carved from."
            )
        if shard % self.ep:
            raise ValueError(
                f"RunLayout(ep={self.ep}, dp_shard={shard}): ep is carved from dp_shard, so it must divide "
                f"it; use an ep that divides {shard} or a dp_shard that is a multiple of {self.ep}."
            )
        if engine == "deepspeed" or stage != 3:
            raise ValueError(
                f"RunLayout(ep={self.ep}, zero_stage={self.zero_stage}): expert parallelism runs under FSDP2 "
                "(dp_shard), not DeepSpeed's ZeRO; leave zero_stage unset."
            )

    def _others_text(self) -> str:
        return " x ".join(f"{n}={getattr(self, n)}" for n in DIMS if n != "dp_shard")

    def _check_combinations(self) -> None:
        """What ``ParallelismConfig`` refuses, refused here too (with the same fix), and the pp options."""
        if self.sp > 1 and (self.tp > 1 or self.cp > 1):
            raise ValueError(
                f"RunLayout(sp={self.sp}, tp={self.tp}, cp={self.cp}): sequence parallelism (Ulysses) does not "
                "compose with tensor or context parallelism (ParallelismConfig refuses it); give those ranks "
                "to dp_shard instead."
            )
        if self.pp_schedule not in PIPELINE_SCHEDULES:
            raise ValueError(
                f"RunLayout(pp_schedule={self.pp_schedule!r}) must be one of {', '.join(PIPELINE_SCHEDULES)}."
            )
        if self.pp_microbatches is not None and self.pp_microbatches < 1:
            raise ValueError(
                f"RunLayout(pp_microbatches={self.pp_microbatches}) must be at least 1 (or None)."
            )
        if self.zero_bucket_size < 1:
            raise ValueError(
                f"RunLayout(zero_bucket_size={self.zero_bucket_size}) must be at least 1 element."
            )

    @property
    def microbatches(self) -> int:
        """Forward passes per step per rank: ``pp_microbatches`` (default ``pp``) under a pipeline, else 1."""
        if self.pp == 1:
            return 1
        return self.pp_microbatches or self.pp

    @property
    def tokens(self) -> int:
        """Tokens one rank's forward pass holds: a micro-batch's, split by context or sequence parallelism."""
        return self.micro_batch_size * self.sequence_length // (self.cp * self.sp)

    @property
    def shard_group(self) -> int:
        """How many ranks split the training state: FSDP shards over dp_shard x cp (``dp_shard_cp``), or
        dp_shard x sp (``dp_shard_sp``): the ranks that split one batch's sequence hold the same weights."""
        return int(self.dp_shard or 1) * self.cp * self.sp

    @property
    def data_parallel(self) -> int:
        return self.dp_replicate * int(self.dp_shard or 1)

    def describe(self) -> str:
        """``dp_replicate=2 x dp_shard=4 x tp=2 (FSDP)``: the sizes above 1 and the sharding (of a
        resolved layout)."""
        sizes = [f"{n}={getattr(self, n)}" for n in DIMS if getattr(self, n) != 1]
        if self.ep > 1:  # ep splits dp_shard: no dimension of its own
            sizes = [f"{size} (ep={self.ep})" if size.startswith("dp_shard=") else size for size in sizes]
        fsdp = self.zero_stage == 3 and self.engine != "deepspeed"
        sharding = (
            " (FSDP)" if fsdp else {0: "", 1: " (ZeRO-1)", 2: " (ZeRO-2)", 3: " (ZeRO-3)"}[self.zero_stage]
        )
        if not sharding and self.dp_replicate > 1:  # replicas with nothing sharded: DDP, buckets and all
            sharding = " (DDP)"
        offload = " + CPU offload" if self.cpu_offload else ""
        pipeline = f" ({self.pp_schedule}, {self.microbatches} micro-batches)" if self.pp > 1 else ""
        return (" x ".join(sizes) or "one process") + pipeline + sharding + offload
