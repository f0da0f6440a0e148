"""The questions `accelerate config` asks for a sharding backend (FSDP, DeepSpeed) or TPU / XLA.

Each function fills one section of the config file with upstream's key names (``fsdp_config``,
``deepspeed_config``, the ``tpu_*`` / ``downcast_bf16`` keys), asking only what follows from earlier
answers: FSDP1-only settings are not asked for FSDP2, CPU offload is not offered on CPU processes,
ZeRO-3 questions only for stage 3. FSDP and DeepSpeed are both values of the one machine question,
so a file can never ask for both.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from accelerate.commands.prompts import Prompter

WRAP_POLICIES = (
    ("TRANSFORMER_BASED_WRAP", "TRANSFORMER_BASED_WRAP: shard each block of the named classes"),
    ("SIZE_BASED_WRAP", "SIZE_BASED_WRAP: shard submodules above a parameter count"),
    ("NO_WRAP", "NO_WRAP: shard the model as one unit"),
)
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
STATE_DICT_TYPES = (
    ("SHARDED_STATE_DICT", "SHARDED_STATE_DICT: each process writes its shard (loads on any process count)"),
    ("FULL_STATE_DICT", "FULL_STATE_DICT: process 0 writes whole files"),
)
OFFLOAD_DEVICES = (("none", "none"), ("cpu", "cpu"), ("nvme", "nvme"))


def package_available(name: str) -> bool:
    """Whether ``name`` can be imported here, without importing it (torch_xla would claim the TPU)."""
    return importlib.util.find_spec(name) is not None


def _positive(what: str) -> Callable[[int], str | None]:
    return lambda value: None if value >= 1 else f"Please give at least 1 ({what})."


def ask_fsdp(prompter: Prompter, use_cpu: bool) -> dict[str, Any]:
    """The ``fsdp_config`` section (upstream's keys; FSDP1 strategies are run on FSDP2 by the launcher)."""
    version = int(
        prompter.select(
            "Which FSDP version? (2 is torch's fully_shard; 1's settings are translated onto it)",
            [("1", "1"), ("2", "2")],  # in this order, a typed number is the version
            default="2",
        )
    )
    config: dict[str, Any] = {"fsdp_version": version}
    if version == 2:
        config["fsdp_reshard_after_forward"] = prompter.confirm(
            "Free the gathered parameters after forward (reshard_after_forward; saves memory, gathers again "
            "in backward)?",
            True,
        )
    else:
        config["fsdp_sharding_strategy"] = prompter.select(
            "What should be your sharding strategy?",
            [(s, s) for s in SHARDING_STRATEGIES],
            default="FULL_SHARD",
        )
    if not use_cpu:  # offloading moves shards to host memory: there is nothing to offload to on CPU runs
        config["fsdp_offload_params"] = prompter.confirm(
            "Offload parameters and gradients to CPU memory?", False
        )
    policy = prompter.select(
        "What should be your auto wrap policy?", list(WRAP_POLICIES), default="TRANSFORMER_BASED_WRAP"
    )
    config["fsdp_auto_wrap_policy"] = policy
    if policy == "TRANSFORMER_BASED_WRAP":
        names = prompter.text(
            "Comma-separated block class names to wrap (case-sensitive, e.g. BertLayer or GPTJBlock,T5Block); "
            "empty to use a transformers model's _no_split_modules",
            "",
        ).strip()
        if names:
            config["fsdp_transformer_layer_cls_to_wrap"] = names
    elif policy == "SIZE_BASED_WRAP":
        config["fsdp_min_num_params"] = prompter.integer(
            "Minimum number of parameters of a submodule wrapped on its own?",
            100_000_000,
            _positive("parameters"),
        )
    if version == 1:
        config["fsdp_backward_prefetch"] = prompter.select(
            "What should be your backward prefetch policy? (FSDP2 prefetches by itself)",
            [(p, p) for p in ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")],
            default="BACKWARD_PRE",
        )
    config["fsdp_state_dict_type"] = prompter.select(
        "How should save_state write the model?", list(STATE_DICT_TYPES), default="SHARDED_STATE_DICT"
    )
    config["fsdp_cpu_ram_efficient_loading"] = prompter.confirm(
        "Load weights on process 0 only and broadcast them at prepare (cpu_ram_efficient_loading; for big "
        "models, mainly transformers ones)?",
        True,
    )
    if version == 1:
        # Efficient loading needs the broadcast; otherwise let the user choose.
        config["fsdp_sync_module_states"] = config["fsdp_cpu_ram_efficient_loading"] or prompter.confirm(
            "Broadcast process 0's weights to the others at prepare (sync_module_states)?", True
        )
    config["fsdp_activation_checkpointing"] = prompter.confirm(
        "Recompute activations in backward (activation checkpointing) to save memory?", False
    )
    return config


def ask_deepspeed(prompter: Prompter) -> dict[str, Any]:
    """The ``deepspeed_config`` section: a DeepSpeed JSON file, or the options written inline (the same
    questions for CPU processes: the launcher sets DS_ACCELERATOR=cpu itself)."""
    config: dict[str, Any] = {}
    if prompter.confirm("Do you want to use a DeepSpeed JSON config file?", False):
        config["deepspeed_config_file"] = prompter.text(
            'Path to the DeepSpeed JSON config file (its values win; use "auto" for what accelerate fills)',
            "ds_config.json",
        )
        config["zero3_init_flag"] = prompter.confirm(
            "If the file selects ZeRO-3: construct models already partitioned (deepspeed.zero.Init)?", False
        )
        return config
    stage = int(
        prompter.select(
            "What should be your DeepSpeed ZeRO stage?",
            [
                ("0", "0 (off)"),
                ("1", "1: optimizer states"),
                ("2", "2: + gradients"),
                ("3", "3: + parameters"),
            ],
            default="2",
        )
    )
    config["zero_stage"] = stage
    if stage >= 2:
        config["offload_optimizer_device"] = prompter.select(
            "Where should optimizer states be offloaded?", list(OFFLOAD_DEVICES), default="none"
        )
        if config["offload_optimizer_device"] == "nvme":
            config["offload_optimizer_nvme_path"] = prompter.text(
                "Path for the optimizer NVMe offload", "/nvme"
            )
    if stage == 3:
        config["offload_param_device"] = prompter.select(
            "Where should parameters be offloaded?", list(OFFLOAD_DEVICES), default="none"
        )
        if config["offload_param_device"] == "nvme":
            config["offload_param_nvme_path"] = prompter.text("Path for the parameter NVMe offload", "/nvme")
    config.setdefault("offload_optimizer_device", "none")
    config.setdefault("offload_param_device", "none")
    config["gradient_accumulation_steps"] = prompter.integer(
        "How many gradient accumulation steps does your script use?", 1, _positive("step")
    )
    if prompter.confirm("Do you want to clip gradients?", False):
        config["gradient_clipping"] = _ask_float(prompter, "Clip gradients to which norm?", 1.0)
    config["zero3_init_flag"] = False
    if stage == 3:
        config["zero3_init_flag"] = prompter.confirm(
            "Construct models already partitioned (deepspeed.zero.Init), for models too big for one process?",
            False,
        )
        config["zero3_save_16bit_model"] = prompter.confirm(
            "Gather the full 16-bit weights when saving the model (zero3_save_16bit_model)?", False
        )
    return config


def _ask_float(prompter: Prompter, question: str, default: float) -> float:
    while True:
        answer = prompter.text(question, str(default)).strip()
        try:
            value = float(answer)
        except ValueError:
            continue  # asked again, as a malformed whole number is
        if value > 0:
            return value


def ask_xla(prompter: Prompter, data: dict[str, Any]) -> None:
    """TPU / XLA settings: the processes (one per XLA device) and the pod for `accelerate tpu-config`."""
    data["use_cpu"] = False
    data["num_processes"] = prompter.integer(
        "How many XLA devices (processes) should this machine use?", 1, _positive("process")
    )
    name = prompter.text("Name of your TPU pod, for `accelerate tpu-config` (empty if none)", "").strip()
    if name:
        data["tpu_name"] = name
        data["tpu_zone"] = prompter.text("Zone of the TPU pod", "us-central1-a").strip()


def ask_downcast_bf16(prompter: Prompter) -> str:
    """``downcast_bf16`` under bf16 on XLA: fp32 -> bf16 and fp64 -> fp32 (XLA_DOWNCAST_BF16)."""
    down = prompter.confirm(
        "On the XLA device, store float32 tensors as bfloat16 and float64 as float32 (downcast_bf16)?", False
    )
    return "yes" if down else "no"


def _ask_pipeline(prompter: Prompter, config: dict[str, Any], prefix: str) -> None:
    """The pipeline's schedule and micro-batches (asked only when pp_size > 1)."""
    stages = config[f"{prefix}pp_size"]
    schedule = prompter.select(
        "Which pipeline schedule? (1F1B: less activation memory than GPipe; Interleaved1F1B: two stages "
        "per process, a smaller bubble)",
        [("1F1B", "1F1B"), ("GPipe", "GPipe"), ("Interleaved1F1B", "Interleaved1F1B")],
        default="1F1B",
    )
    config[f"{prefix}pp_schedule"] = schedule

    def enough(value: int) -> str | None:
        if value < 1 or (schedule != "GPipe" and value < stages):
            return f"Please give at least {1 if schedule == 'GPipe' else stages} ({schedule} with {stages} stages)."
        return None

    config[f"{prefix}pp_microbatches"] = prompter.integer(
        "How many micro-batches per batch? (more shrink the pipeline bubble; the batch size must be a multiple)",
        stages,
        enough,
    )


def ask_parallelism(
    prompter: Prompter, num_processes: int, use_cpu: bool, deepspeed: bool
) -> dict[str, Any] | None:
    """The ``parallelism_config`` section (N-D parallelism), or None when the user wants none.

    The sizes must multiply to ``num_processes``: the data-parallel shard size is asked last, with the
    size that completes the product as its default, and any other answer is refused on the spot.
    Context parallelism is not offered on CPU processes (ring attention has no CPU kernel), sequence
    parallelism only with DeepSpeed (it is DeepSpeed's Ulysses) and pipeline parallelism only without
    it (DeepSpeed's engine cannot run torch's schedules); with pp_size > 1 the schedule and the
    micro-batches per batch follow.
    """
    if not prompter.confirm(
        "Do you want to use a parallelism config (pipeline / tensor / context parallel, HSDP: several "
        "kinds of parallelism on one device mesh)?",
        False,
    ):
        return None
    prefix = "parallelism_config_"
    config: dict[str, Any] = {}

    def divides(what: str, used: int) -> Callable[[int], str | None]:
        def check(value: int) -> str | None:
            if value < 1:
                return f"Please give at least 1 ({what})."
            if num_processes % (used * value):
                return f"The sizes must multiply to the number of processes ({num_processes})."
            return None

        return check

    used = 1
    for dim, what in (("pp", "pipeline-parallel degree"), ("tp", "tensor-parallel degree"), ("cp", "context-parallel degree"),
                      ("sp", "sequence-parallel degree"), ("dp_replicate", "data-parallel replicas")):  # fmt: skip
        if (dim == "cp" and use_cpu) or (dim == "sp" and not deepspeed) or (dim == "pp" and deepspeed):
            continue
        config[f"{prefix}{dim}_size"] = prompter.integer(
            f"What {what} (size of the {dim} dimension)?", 1, divides(what, used)
        )
        used *= config[f"{prefix}{dim}_size"]
    remaining = num_processes // used
    config[f"{prefix}dp_shard_size"] = prompter.integer(
        "How many data-parallel shards (dp_shard, FSDP)? The sizes must multiply to the number of processes",
        remaining,
        lambda value: (
            None if value == remaining else f"It must be {remaining}: {num_processes} processes / {used}."
        ),
    )
    if config.get(f"{prefix}pp_size", 1) > 1:
        _ask_pipeline(prompter, config, prefix)
    if config.get(f"{prefix}cp_size", 1) > 1:
        config[f"{prefix}cp_comm_strategy"] = prompter.select(
            "How should ring attention exchange keys and values?",
            [("allgather", "allgather"), ("alltoall", "alltoall")],
            default="allgather",
        )
    return config
