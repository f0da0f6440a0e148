"""``accelerate launch [flags] script.py args...`` (or ``-m module``).

Flags keep Hugging Face Accelerate's names (``--num_processes``; the dashed spelling
``--num-processes`` works too). Every flag defaults to "not given" so that the plan can tell a flag
from a config-file value and report where each setting came from (``--dry_run``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from accelerate.utils.enums import MIXED_PRECISION_MODES

HELP = "Run a training script on one or several processes/machines."
DYNAMO_BACKENDS = (
    "no", "eager", "aot_eager", "inductor", "aot_ts_nvfuser", "nvprims_nvfuser", "cudagraphs", "ofi", "fx2trt",
    "onnxrt", "tensorrt", "aot_torchxla_trace_once", "torchxla_trace_once", "torhchxla_trace_once", "ipex", "tvm", "hpu_backend",
)  # fmt: skip
DYNAMO_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Flags that are settings of the plan (everything else is about the command or the output).
SETTING_FLAGS = (
    "cpu", "multi_gpu", "num_processes", "num_machines", "machine_rank", "main_process_ip", "main_process_port",
    "rdzv_backend", "same_network", "rdzv_conf", "nnodes", "rdzv_endpoint", "max_restarts", "monitor_interval", "gpu_ids",
    "mixed_precision", "gradient_accumulation_steps", "debug", "dynamo_backend", "dynamo_mode",
    "dynamo_use_fullgraph", "dynamo_use_dynamic", "dynamo_use_regional_compilation", "num_cpu_threads_per_process",
    "tee", "log_dir", "role", "mpirun_hostfile", "use_deepspeed",
)  # fmt: skip

# Upstream's flags for features that cannot run here. They parse (a command line written for upstream
# reaches a clear error rather than "unrecognized arguments"), and launch/checks.py refuses each one by
# name with its feature. name -> (type, choices); "switch" is a store_true flag.
FSDP_FLAGS = (
    "fsdp_activation_checkpointing", "fsdp_activation_checkpointing_offload", "fsdp_auto_wrap_policy",
    "fsdp_backward_prefetch", "fsdp_cpu_ram_efficient_loading", "fsdp_forward_prefetch",
    "fsdp_offload_params", "fsdp_reshard_after_forward", "fsdp_sharding_strategy", "fsdp_state_dict_type",
    "fsdp_sync_module_states", "fsdp_transformer_layer_cls_to_wrap", "fsdp_use_orig_params",
)  # fmt: skip
# DeepSpeed's multi-machine launcher (pdsh hostfiles): refused; every machine runs `accelerate launch`.
DEEPSPEED_FLAGS = ("deepspeed_exclusion_filter", "deepspeed_hostfile", "deepspeed_inclusion_filter")
# DeepSpeed's settings (with --use_deepspeed): name -> (argparse keywords, help).
DEEPSPEED_SETTINGS: dict[str, tuple[dict[str, Any], str]] = {
    "deepspeed_config_file": (
        {"metavar": "PATH"},
        'DeepSpeed JSON config (its "auto" values are filled at prepare).',
    ),
    "zero_stage": ({"type": int, "metavar": "0-3"}, "ZeRO stage (default 2)."),
    "offload_optimizer_device": ({"metavar": "none|cpu|nvme"}, "Where ZeRO keeps the optimizer state."),
    "offload_param_device": ({"metavar": "none|cpu|nvme"}, "Where ZeRO-3 keeps the parameters."),
    "offload_optimizer_nvme_path": ({"metavar": "PATH"}, "NVMe folder for the offloaded optimizer state."),
    "offload_param_nvme_path": ({"metavar": "PATH"}, "NVMe folder for the offloaded parameters."),
    "gradient_clipping": (
        {"type": float, "metavar": "MAX_NORM"},
        "DeepSpeed's gradient clipping (L2 max norm).",
    ),
    "zero3_init_flag": ({"metavar": "BOOL"}, "Build models partitioned (ZeRO-3, deepspeed.zero.Init)."),
    "zero3_save_16bit_model": ({"metavar": "BOOL"}, "Gather the ZeRO-3 weights when saving the model."),
    "deepspeed_moe_layer_cls_names": (
        {"metavar": "NAMES"},
        "Comma-separated MoE layer classes (ZeRO-3 leaf modules).",
    ),
    "deepspeed_multinode_launcher": (
        {"metavar": "LAUNCHER"},
        "Only 'standard' here (torch.distributed.run on each machine).",
    ),
}
MEGATRON_STR_FLAGS = (
    "megatron_lm_attention_backend", "megatron_lm_attention_softmax_in_fp32",
    "megatron_lm_calculate_per_token_loss", "megatron_lm_recompute_activations",
    "megatron_lm_recompute_granularity", "megatron_lm_recompute_method", "megatron_lm_sequence_parallelism",
    "megatron_lm_use_distributed_optimizer", "megatron_lm_use_rotary_position_embeddings",
)  # fmt: skip
MEGATRON_INT_FLAGS = (
    "megatron_lm_context_parallel_size", "megatron_lm_decoder_last_pipeline_num_layers",
    "megatron_lm_expert_model_parallel_size", "megatron_lm_expert_tensor_parallel_size",
    "megatron_lm_num_micro_batches", "megatron_lm_pp_degree", "megatron_lm_recompute_num_layers",
    "megatron_lm_tp_degree",
)  # fmt: skip
MEGATRON_FLOAT_FLAGS = (
    "megatron_lm_attention_dropout",
    "megatron_lm_gradient_clipping",
    "megatron_lm_hidden_dropout",
)
MEGATRON_BOOL_FLAGS = (
    "megatron_lm_eod_mask_loss", "megatron_lm_no_load_optim", "megatron_lm_no_save_optim",
    "megatron_lm_optimizer_cpu_offload", "megatron_lm_overlap_cpu_optimizer_d2h_h2d",
    "megatron_lm_use_custom_fsdp", "megatron_lm_use_precision_aware_optimizer",
)  # fmt: skip


def _flag_kwargs() -> dict[str, dict[str, Any]]:
    """Every refused flag with its argparse keywords (types and choices as upstream's)."""
    out: dict[str, dict[str, Any]] = {}
    for name in ("use_fsdp", "use_megatron_lm", "tpu", "enable_cpu_affinity", "downcast_bf16",
                 "fp8_use_autocast_during_eval", "tpu_use_sudo", "no_tpu_cluster"):  # fmt: skip
        out[name] = {"action": "store_true"}
    for name in (*FSDP_FLAGS, *DEEPSPEED_FLAGS, *MEGATRON_STR_FLAGS, "main_training_function",
                 "aws_access_key_id", "aws_secret_access_key", "env", "vm"):  # fmt: skip
        out[name] = {"type": str}
    for name in (
        *MEGATRON_INT_FLAGS,
        "fsdp_min_num_params",
        "fp8_amax_history_len",
        "fp8_interval",
        "fp8_margin",
    ):
        out[name] = {"type": int}
    for name in MEGATRON_FLOAT_FLAGS:
        out[name] = {"type": float}
    for name in MEGATRON_BOOL_FLAGS:
        out[name] = {"type": _bool}
    out["fsdp_version"] = {"type": str, "choices": ("1", "2")}
    out["fp8_backend"] = {"type": _lower, "choices": ("ao", "te", "msamp")}
    out["fp8_format"] = {"type": str.upper, "choices": ("HYBRID", "E4M3", "E5M2")}
    out["fp8_amax_compute_algo"] = {"type": str, "choices": ("max", "most_recent")}
    out["fp8_opt_level"] = {"type": str, "choices": ("O1", "O2")}
    out["fp8_override_linear_precision"] = {"type": str, "metavar": "(BOOL,BOOL,BOOL)"}
    # Text, read as a boolean by the plan: a False here would read as "not given" (flags_of).
    out["fp8_enable_fsdp_float8_all_gather"] = {"metavar": "BOOL"}
    out["fp8_pad_inner_dim"] = {"metavar": "BOOL"}
    return out


REFUSED_FLAGS: dict[str, dict[str, Any]] = {}  # filled below, once _bool/_lower exist


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "y", "on"):
        return True
    if lowered in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _lower(value: str) -> str:
    return value.lower()


def _machines(value: str) -> int | str:
    """A machine count, or an elastic range ``MIN:MAX`` (checked by the plan, which names the flag)."""
    return int(value) if value.strip().isdigit() else value.strip()


# N-D parallelism (ParallelismConfig): name -> (argparse keywords, help). Upstream's defaults apply
# when a flag is not given (launch/parallelism.py); the flags default to None to tell "not given".
PARALLELISM_FLAGS: dict[str, tuple[dict[str, Any], str]] = {
    "use_parallelism_config": ({"action": "store_true"}, "Give the script a ParallelismConfig built from these sizes "
                               "(their product must be --num_processes; --dry_run prints the device mesh)."),
    "parallelism_config_dp_replicate_size": ({"type": int, "metavar": "N"}, "Data-parallel replicas (DDP; HSDP's outer dimension). Default 1."),
    "parallelism_config_dp_shard_size": ({"type": int, "metavar": "N"}, "Data-parallel shards (FSDP2, with --use_fsdp). Default 1."),
    "parallelism_config_tp_size": ({"type": int, "metavar": "N"}, "Tensor-parallel degree (runs on CPU processes too). Default 1."),
    "parallelism_config_cp_size": ({"type": int, "metavar": "N"}, "Context-parallel degree (GPUs only: ring attention has no CPU kernel). Default 1."),
    "parallelism_config_cp_backend": ({"choices": ("torch",)}, "Context-parallel backend. Default torch."),
    "parallelism_config_cp_comm_strategy": ({"metavar": "allgather|alltoall"}, "How ring attention exchanges keys and values. Default allgather."),
    "parallelism_config_sp_size": ({"type": int, "metavar": "N"}, "Sequence-parallel (Ulysses) degree: each process holds 1/N of every sequence. Default 1."),
    "parallelism_config_sp_backend": ({"choices": ("deepspeed", "torch")}, "Sequence-parallel backend: torch (native Ulysses) without DeepSpeed, deepspeed with --use_deepspeed. Default: follows --use_deepspeed."),
    "parallelism_config_sp_seq_length": ({"metavar": "N"}, "Sequence length under sequence parallelism."),
    # Text, read as a boolean by the plan: a False here would read as "not given" (flags_of).
    "parallelism_config_sp_seq_length_is_variable": ({"metavar": "BOOL"}, "Sequence lengths vary between batches. Default true."),
    "parallelism_config_sp_attn_implementation": ({"metavar": "NAME"}, "Attention kernel under sequence parallelism. Default sdpa."),
    "parallelism_config_pp_size": ({"type": int, "metavar": "N"}, "Pipeline-parallel stages (training; beyond upstream). Default 1."),
    "parallelism_config_pp_schedule": ({"choices": ("GPipe", "1F1B", "Interleaved1F1B")}, "Pipeline schedule. Default 1F1B."),
    "parallelism_config_ep_size": ({"type": int, "metavar": "N"}, "Expert-parallel degree (mixture-of-experts layers; beyond upstream): each process holds 1/N of every layer's experts. Carved from dp_shard, so it adds no process. Default 1."),
    "parallelism_config_pp_microbatches": ({"type": int, "metavar": "N"}, "Micro-batches per batch under pipeline parallelism. Default pp_size."),
}  # fmt: skip


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """The launch flags (shared by ``accelerate launch`` and ``accelerate test``'s parser, partly)."""

    def flag(name: str, *short: str, **kwargs: Any) -> None:
        names = [*short, f"--{name}"]
        if "_" in name:
            names.append(f"--{name.replace('_', '-')}")
        kwargs.setdefault("default", None)
        group.add_argument(*names, dest=name, **kwargs)

    def switch(name: str, help: str) -> None:
        flag(name, action="store_true", help=help)

    group = parser.add_argument_group("Config file")
    flag("config_file", metavar="PATH", help="Launch config to read (default: $ACCELERATE_CONFIG_FILE, else "
         "the default location; `accelerate env` shows it).")  # fmt: skip

    group = parser.add_argument_group("Processes and hardware")
    flag("num_processes", type=int, metavar="N", help="Total number of processes, over all machines.")
    switch("cpu", "Run on CPU only (with --num_processes N: N gloo processes).")
    switch("multi_gpu", "One process per GPU (the default when several GPUs are visible).")
    flag("gpu_ids", metavar="IDS", help="Comma-separated GPU ids this machine may use, or 'all'.")
    flag("num_cpu_threads_per_process", type=int, metavar="N", help="OMP_NUM_THREADS of each process "
         "(default: 1 with several processes, unless OMP_NUM_THREADS is set).")  # fmt: skip
    flag("mixed_precision", type=_lower, choices=MIXED_PRECISION_MODES, help="Mixed precision mode.")
    flag("gradient_accumulation_steps", type=int, metavar="N", help="Default micro-steps per optimizer step.")
    switch("debug", "Check tensor shapes across processes before each collective (finds hangs).")

    group = parser.add_argument_group("Several machines and the rendezvous")
    flag("num_machines", type=_machines, metavar="N|MIN:MAX", help="Number of machines taking part; a range "
         "MIN:MAX makes the run elastic (machines may leave and join; see --nnodes).")  # fmt: skip
    flag("nnodes", type=_machines, metavar="N|MIN:MAX", help="torch.distributed.run's spelling of --num_machines: "
         "MIN:MAX re-forms the group (c10d) when a machine leaves or joins; the script resumes with "
         "load_state(missing_ok=True).")  # fmt: skip
    flag("machine_rank", type=int, metavar="RANK", help="This machine's rank, 0 .. num_machines - 1.")
    flag("main_process_ip", metavar="IP", help="Address of machine 0 (default 127.0.0.1 on one machine).")
    flag("main_process_port", type=int, metavar="PORT", help="Port on machine 0 (default 29500, or a free "
         "port on one machine when 29500 is busy).")  # fmt: skip
    flag(
        "rdzv_backend", metavar="BACKEND", help="torch.distributed.run rendezvous: static (default) or c10d."
    )
    flag("rdzv_endpoint", metavar="HOST:PORT", help="Where the rendezvous meets (torch.distributed.run's "
         "spelling of --main_process_ip/--main_process_port).")  # fmt: skip
    flag("rdzv_conf", metavar="K=V,...", help="Extra rendezvous configuration for torch.distributed.run.")
    switch("same_network", "The machines share a local network (informational for static rendezvous).")
    flag(
        "max_restarts", type=int, metavar="N", help="Restarts of the whole group after a failure (default 0)."
    )
    flag("monitor_interval", type=float, metavar="SECONDS", help="How often the agent checks the processes "
         "(default 0.1).")  # fmt: skip

    group = parser.add_argument_group("torch.compile")
    flag(
        "dynamo_backend",
        type=_lower,
        choices=DYNAMO_BACKENDS,
        help="torch.compile backend ('no' to disable).",
    )
    flag("dynamo_mode", choices=DYNAMO_MODES, help="torch.compile mode.")
    switch("dynamo_use_fullgraph", "torch.compile(fullgraph=True).")
    switch("dynamo_use_dynamic", "torch.compile(dynamic=True).")
    switch(
        "dynamo_use_regional_compilation",
        "Compile each repeated block once (compile_regions), not the whole model.",
    )

    group = parser.add_argument_group("torch.distributed.run's logs and roles")
    flag("tee", "-t", metavar="STREAMS", help="Also write the processes' output to --log_dir: 1 stdout, 2 stderr, "
         "3 both (one value for all ranks, or RANK:STREAMS,...).")  # fmt: skip
    flag(
        "log_dir", metavar="DIR", help="Folder for torch.distributed.run's per-process logs and error files."
    )
    flag(
        "role", metavar="NAME", help="The workers' role (ROLE_NAME in their environment; default 'default')."
    )

    group = parser.add_argument_group("mpirun (CPU processes on several machines)")
    flag("mpirun_hostfile", metavar="PATH", help="Start the CPU processes with mpirun (Open MPI, MPICH or Intel MPI) "
         "on the hosts this file lists.")  # fmt: skip

    group = parser.add_argument_group("FSDP (fully sharded data parallelism, run by FSDP2)")
    from accelerate.backends.fsdp.launch import FLAG_HELP

    for name, kwargs in FSDP_FLAG_KWARGS.items():
        flag(
            name,
            help=FLAG_HELP.get(name, "Shard parameters, gradients and optimizer state (FSDP)."),
            **kwargs,
        )
    group = parser.add_argument_group("DeepSpeed (ZeRO stages 0-3; on CPU processes too)")
    switch("use_deepspeed", "Train with DeepSpeed (the Accelerator gets a DeepSpeedPlugin from these flags).")
    for name, (kwargs, text) in DEEPSPEED_SETTINGS.items():
        flag(name, help=text, **kwargs)

    group = parser.add_argument_group("fp8 training (with --mixed_precision fp8)")
    from accelerate.launch.fp8 import FLAG_HELP as FP8_HELP

    for name, kwargs in FP8_FLAG_KWARGS.items():
        flag(name, help=FP8_HELP[name], **kwargs)
    group = parser.add_argument_group("N-D parallelism (ParallelismConfig: data, tensor, context, sequence)")
    for name, (kwargs, text) in PARALLELISM_FLAGS.items():
        flag(name, help=text, **kwargs)
    from accelerate.backends.fault_tolerance.launch import FLAGS as FT_FLAGS

    group = parser.add_argument_group("Fault-tolerant replica groups (torchft; beyond upstream)")
    for name, (kwargs, text) in FT_FLAGS.items():
        flag(name, help=text, **kwargs)
    group = parser.add_argument_group(
        "Upstream features that cannot run here (accepted, then refused by name with the reason)"
    )
    from accelerate.launch.checks import refused_flag_reason
    from accelerate.launch.xla import FLAG_HELP

    for name, kwargs in REFUSED_FLAGS.items():
        flag(name, help=FLAG_HELP.get(name) or f"Refused: {refused_flag_reason(name)}.", **kwargs)


REFUSED_FLAGS.update(_flag_kwargs())
# FSDP runs (on FSDP2): its flags leave the refused table for their own group.
FSDP_FLAG_KWARGS = {
    name: REFUSED_FLAGS.pop(name) for name in ("use_fsdp", *FSDP_FLAGS, "fsdp_min_num_params", "fsdp_version")
}
# fp8 runs (torchao anywhere; Transformer Engine / MS-AMP on fp8 GPUs): its flags get their own group too.
FP8_FLAG_KWARGS = {name: REFUSED_FLAGS.pop(name) for name in list(REFUSED_FLAGS) if name.startswith("fp8_")}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "launch",
        help=HELP,
        description="Run SCRIPT with ARGS on the processes and machines that the config file, the "
        "ACCELERATE_* environment variables and these flags describe (flags win over the environment, "
        "which wins over the config file). --dry_run shows every setting with its source.",
        usage="accelerate launch [flags] SCRIPT [ARGS...]  |  accelerate launch [flags] -m MODULE [ARGS...]",
        allow_abbrev=False,
    )
    add_launch_arguments(parser)
    group = parser.add_argument_group("What to run")
    group.add_argument(
        "-m", "--module", action="store_true", help="SCRIPT is a module name (like python -m)."
    )
    group.add_argument("--no_python", "--no-python", dest="no_python", action="store_true",
                       help="SCRIPT is an executable; run it without the Python interpreter.")  # fmt: skip
    group.add_argument("--dry_run", "--dry-run", dest="dry_run", action="store_true",
                       help="Print every resolved setting with its source and the command; run nothing.")  # fmt: skip
    group.add_argument("--check_plan", "--check-plan", dest="check_plan", action="store_true",
                       help="With --dry_run: run every rank's set-up (device mesh, data sharding) on torch's fake "
                       "process group for --num_processes ranks, in this one process.")  # fmt: skip
    group.add_argument("--reshard_to", "--reshard-to", dest="reshard_to", default=None, metavar="DIM=SIZE,...",
                       help="With --check_plan: also plan which saved FSDP2 checkpoint shards each rank of this "
                       "other layout reads (e.g. dp_replicate=8,dp_shard=4,tp=8; unnamed dimensions are 1).")  # fmt: skip
    group.add_argument("-q", "--quiet", action="store_true", help="Do not print which config file was read.")
    parser.add_argument(
        "training_script", metavar="SCRIPT", help="The script, module (-m) or executable to run."
    )
    parser.add_argument("training_script_args", metavar="ARGS", nargs=argparse.REMAINDER,
                        help="Arguments for the script.")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def flags_of(args: argparse.Namespace) -> dict[str, Any]:
    """The setting flags the user gave (store_true switches that were not given count as not given)."""
    out: dict[str, Any] = {}
    from accelerate.backends.fault_tolerance.launch import FLAGS as FT_FLAGS

    for name in (*SETTING_FLAGS, *DEEPSPEED_SETTINGS, *PARALLELISM_FLAGS, *REFUSED_FLAGS, *FSDP_FLAG_KWARGS,
                 *FP8_FLAG_KWARGS, *FT_FLAGS):  # fmt: skip
        value = getattr(args, name, None)
        if value is not None and value is not False:
            out[name] = value
    return out


def run(args: argparse.Namespace) -> int:
    from accelerate.config.config_file import ConfigFileError
    from accelerate.launch.checks import LaunchError

    try:
        plan = make_plan(args, os.environ)
    except (LaunchError, ConfigFileError) as exc:
        print(f"accelerate launch: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print("accelerate launch --dry_run: nothing was started.\n")
        print(plan.describe())
        if args.reshard_to is not None and not args.check_plan:
            print(
                "accelerate launch: error: --reshard_to needs --check_plan (with --dry_run).", file=sys.stderr
            )
            return 2
        return _check_plan(plan, args.reshard_to) if args.check_plan else 0
    for note in plan.notes:
        print(f"accelerate launch: {note}", file=sys.stderr)
    for warning in plan.warnings:
        print(f"accelerate launch: warning: {warning}", file=sys.stderr)
    from accelerate.backends.fault_tolerance import launch as fault_tolerance
    from accelerate.launch.runner import run_plan

    lighthouse = fault_tolerance.start_lighthouse_for(
        {name: plan.value(name) for name in fault_tolerance.FLAGS}
    )
    try:
        return run_plan(plan)
    finally:
        if lighthouse is not None:
            lighthouse.shutdown()


def _check_plan(plan: Any, reshard_to: str | None = None) -> int:
    """``--dry_run --check_plan``: the plan checker over the plan's sizes (plain data parallelism without
    a ParallelismConfig), and the reshard plan to ``--reshard_to``; 1 when it finds a problem."""
    from accelerate.launch import parallelism
    from accelerate.planning.check import check_plan
    from accelerate.planning.checkpoint_plan import parse_sizes

    world = int(plan.value("num_processes"))
    sizes = parallelism.sizes(plan.settings) if parallelism.in_use(plan.settings) else {"dp_replicate": world}
    ep = plan.settings.get("parallelism_config_ep_size")
    if parallelism.in_use(plan.settings) and ep is not None and int(ep.value) > 1:
        sizes["ep"] = int(ep.value)  # carved from dp_shard: the checker builds the expert mesh too
    try:
        target = parse_sizes(reshard_to) if reshard_to is not None else None
        check = check_plan(sizes, world, reshard_to=target)
    except ValueError as exc:  # a --reshard_to that is not a layout, or one the plan cannot reach
        print(f"accelerate launch: error: {exc}", file=sys.stderr)
        return 2
    print("\n" + check.summary())
    if check.reshard is not None:
        print("\n" + check.reshard.describe())
    return 0 if check.ok else 1


def make_plan(args: argparse.Namespace, environ: Any, *, quiet: bool | None = None) -> Any:
    """Reads the config file (saying which one when it is the default) and builds the plan."""
    from accelerate.config.config_file import load_config_file, locate_config_file
    from accelerate.launch.plan import build_plan

    location = locate_config_file(args.config_file, environ)
    config = load_config_file(location.path) if location.path is not None else None
    quiet = args.quiet if quiet is None else quiet
    if location.source == "default" and not args.dry_run:
        # A file nobody named on the command line changes the run; always say which one it was.
        if location.path is not None:
            print(f"accelerate launch: using the default config file {location.path}", file=sys.stderr)
        elif not quiet:
            print(
                f"accelerate launch: no config file at {location.searched[0]}; using defaults and flags "
                "(`accelerate config` writes one).",
                file=sys.stderr,
            )
    return build_plan(
        script=args.training_script,
        script_args=args.training_script_args,
        flags=flags_of(args),
        config=config,
        config_location=location,
        module=args.module,
        no_python=args.no_python,
        environ=environ,
        dry_run=args.dry_run,
    )


# --- upstream's module-level names (transformers and other clients import them from here) ----------
def launch_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``accelerate launch`` parser: added to ``subparsers`` when given, else a standalone parser."""
    if subparsers is not None:
        return add_parser(subparsers)
    root = argparse.ArgumentParser(prog="accelerate", allow_abbrev=False)
    return add_parser(root.add_subparsers(prog="accelerate"))


def launch_command(args: argparse.Namespace) -> None:
    """Runs a parsed ``accelerate launch`` command; a failed launch raises ``CalledProcessError``."""
    import subprocess

    code = run(args)
    if code != 0:
        raise subprocess.CalledProcessError(code, ["accelerate", "launch", str(args.training_script)])
