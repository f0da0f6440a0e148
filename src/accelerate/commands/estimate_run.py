"""``accelerate estimate-memory``'s run options: the per-rank estimate of a parallel training layout.

Upstream's command prints one table of load and Adam training sizes per dtype; given any option
below (or a safetensors checkpoint or ``module:function``, which upstream cannot read), the command
prints the per-rank estimate of :mod:`accelerate.planning` instead: parameters, gradients,
optimizer states, activations and communication buffers, the most loaded rank's peak, and with
``--max_memory`` whether it fits and which layouts of the world size do. No torch is imported for a
config.json or a safetensors checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from accelerate.planning.layout import DEEPSPEED_BUCKET, PIPELINE_SCHEDULES
from accelerate.utils.dataclasses import MIXED_PRECISION_MODES

# (flag, argparse keywords): every default is None, so "given" is "not None".
_RUN_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "--world_size",
        {
            "type": int,
            "help": "Processes in the run (default: the product of the sizes given, else 1). Alone it "
            "means FSDP over them (dp_shard takes what the other sizes leave, as in ParallelismConfig); "
            "plain DDP, what Accelerator() runs without a parallelism config, is --dp_replicate_size N.",
        },
    ),
    (
        "--dp_replicate_size",
        {"type": int, "help": "ParallelismConfig dp_replicate_size (DDP/HSDP replicas)."},
    ),
    (
        "--dp_shard_size",
        {
            "type": int,
            "help": "ParallelismConfig dp_shard_size (FSDP shards; default: what "
            "the other sizes leave of the world size).",
        },
    ),
    ("--tp_size", {"type": int, "help": "ParallelismConfig tp_size (tensor parallelism)."}),
    ("--cp_size", {"type": int, "help": "ParallelismConfig cp_size (context parallelism)."}),
    ("--sp_size", {"type": int, "help": "ParallelismConfig sp_size (Ulysses sequence parallelism)."}),
    (
        "--ep_size",
        {
            "type": int,
            "help": "ParallelismConfig ep_size (expert parallelism, carved from dp_shard_size: no process of its "
            "own): each process holds 1/N of every MoE layer's experts; the model's num_experts "
            "(num_local_experts) comes from its config.",
        },
    ),
    ("--pp_size", {"type": int, "help": "ParallelismConfig pp_size (pipeline stages)."}),
    (
        "--pp_schedule",
        {"choices": list(PIPELINE_SCHEDULES), "help": "Pipeline schedule with --pp_size (default: 1F1B)."},
    ),
    (
        "--pp_microbatches",
        {
            "type": int,
            "help": "Micro-batches per step with --pp_size (default: pp_size), each --micro_batch_size.",
        },
    ),
    (
        "--zero_stage",
        {
            "type": int,
            "choices": [0, 1, 2, 3],
            "help": "DeepSpeed ZeRO stage over the data-parallel "
            "shards (default: 3, FSDP, when dp_shard_size > 1).",
        },
    ),
    (
        "--zero_bucket_size",
        {
            "type": int,
            "help": "DeepSpeed's reduce_bucket_size in elements, allocated whole with --zero_stage "
            "(default: DeepSpeed's 500000000; accelerate fills a transformers model's \"auto\" with hidden_size**2).",
        },
    ),
    (
        "--cpu_offload",
        {
            "action": "store_const",
            "const": True,
            "help": "Offload parameters, gradients and optimizer states to host memory.",
        },
    ),
    (
        "--mixed_precision",
        {"choices": list(MIXED_PRECISION_MODES), "help": "Compute precision (default: no)."},
    ),
    (
        "--optimizer",
        {
            "choices": ["adamw", "adam", "sgd", "sgd_momentum", "adam8bit"],
            "help": "Optimizer whose states count (default: adamw).",
        },
    ),
    ("--micro_batch_size", {"type": int, "help": "Samples per rank per forward pass (default: 1)."}),
    ("--sequence_length", {"type": int, "help": "Tokens per sample (default: 1024)."}),
    (
        "--activation_checkpointing",
        {"action": "store_const", "const": True, "help": "Recompute each block's activations in backward."},
    ),
    (
        "--max_memory",
        {
            "type": str,
            "help": "Memory per accelerator, like 80GB or 80GiB: says whether the run fits, "
            "by how much, and lists the layouts that fit.",
        },
    ),
    ("--json", {"action": "store_const", "const": True, "help": "Print the estimate as JSON."}),
)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the run options (an argument group, each with its dashed spelling too)."""
    group = parser.add_argument_group("Per-rank estimate of a training run (offline)")
    for flag, keywords in _RUN_OPTIONS:
        group.add_argument(flag, flag.replace("_", "-"), dest=flag[2:], default=None, **keywords)


def wants_run_estimate(args: argparse.Namespace) -> bool:
    """A run option was given, or the model is one only the per-rank estimate reads."""
    if any(getattr(args, flag[2:], None) is not None for flag, _ in _RUN_OPTIONS):
        return True
    source = args.model_name
    return (
        source.endswith(".safetensors")
        or (":" in source and not os.path.exists(source))
        or (os.path.isdir(source) and not os.path.isfile(os.path.join(source, "config.json")))
    )


def layout_of(args: argparse.Namespace) -> Any:
    """The :class:`~accelerate.planning.layout.RunLayout` the options describe."""
    from accelerate.planning.layout import RunLayout

    sizes = {
        name: getattr(args, f"{name}_size") for name in ("dp_replicate", "dp_shard", "pp", "cp", "sp", "tp")
    }
    world = args.world_size
    if world is None:
        world = 1
        for value in sizes.values():
            world *= value or 1
    return RunLayout(
        world_size=world, dp_replicate=sizes["dp_replicate"] or 1, dp_shard=sizes["dp_shard"],
        tp=sizes["tp"] or 1, cp=sizes["cp"] or 1, zero_stage=args.zero_stage or 0,
        cpu_offload=bool(args.cpu_offload), mixed_precision=args.mixed_precision or "no",
        optimizer=args.optimizer or "adamw", micro_batch_size=args.micro_batch_size or 1,
        sequence_length=args.sequence_length or 1024, activation_checkpointing=bool(args.activation_checkpointing),
        pp=sizes["pp"] or 1, sp=sizes["sp"] or 1, pp_schedule=args.pp_schedule or "1F1B",
        pp_microbatches=args.pp_microbatches, zero_bucket_size=args.zero_bucket_size or DEEPSPEED_BUCKET,
        ep=args.ep_size or 1,
    )  # fmt: skip


def run_estimate(args: argparse.Namespace) -> str:
    """The report the options ask for (text, or JSON with ``--json``).

    Raises:
        ValueError: the model cannot be read offline, or the sizes do not make a layout (the message
            names the option and the fix).
    """
    from accelerate.planning import estimate_memory, layouts_that_fit, load_model_shape, parse_memory
    from accelerate.planning.report import as_data, render

    model = load_model_shape(args.model_name)
    layout = layout_of(args)
    estimate = estimate_memory(model, layout)
    limit = parse_memory(args.max_memory) if args.max_memory is not None else None
    fitting = layouts_that_fit(model, layout, limit) if limit is not None else None
    if args.json:
        return json.dumps(as_data(estimate, limit, fitting), indent=2)
    return render(estimate, limit, fitting)
