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

from accelerate.utils.dataclasses import MIXED_PRECISION_MODES

HELP = "Run a training script on one or several processes/machines."
DYNAMO_BACKENDS = (
    "no", "eager", "aot_eager", "inductor", "aot_ts_nvfuser", "nvprims_nvfuser", "cudagraphs", "ofi", "fx2trt",
    "onnxrt", "tensorrt", "aot_torchxla_trace_once", "torchxla_trace_once", "ipex", "tvm", "hpu_backend",
)  # fmt: skip
DYNAMO_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Flags that are settings of the plan (everything else is about the command or the output).
SETTING_FLAGS = (
    "cpu", "multi_gpu", "num_processes", "num_machines", "machine_rank", "main_process_ip", "main_process_port",
    "rdzv_backend", "same_network", "rdzv_conf", "max_restarts", "monitor_interval", "gpu_ids",
    "mixed_precision", "gradient_accumulation_steps", "debug", "dynamo_backend", "dynamo_mode",
    "dynamo_use_fullgraph", "dynamo_use_dynamic", "num_cpu_threads_per_process",
    "use_deepspeed", "use_fsdp", "tpu", "use_megatron_lm", "enable_cpu_affinity",
)  # fmt: skip


def _lower(value: str) -> str:
    return value.lower()


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
    flag("num_machines", type=int, metavar="N", help="Number of machines taking part.")
    flag("machine_rank", type=int, metavar="RANK", help="This machine's rank, 0 .. num_machines - 1.")
    flag("main_process_ip", metavar="IP", help="Address of machine 0 (default 127.0.0.1 on one machine).")
    flag("main_process_port", type=int, metavar="PORT", help="Port on machine 0 (default 29500, or a free "
         "port on one machine when 29500 is busy).")  # fmt: skip
    flag(
        "rdzv_backend", metavar="BACKEND", help="torch.distributed.run rendezvous: static (default) or c10d."
    )
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

    group = parser.add_argument_group("Not available yet (refused with an error, never ignored)")
    switch("use_deepspeed", "DeepSpeed.")
    switch("use_fsdp", "Fully sharded data parallel.")
    switch("use_megatron_lm", "Megatron-LM.")
    switch("tpu", "TPU / XLA.")
    switch("enable_cpu_affinity", "Pin processes to CPU cores.")


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
    for name in SETTING_FLAGS:
        value = getattr(args, name, None)
        if value is not None and value is not False:
            out[name] = value
    return out


def run(args: argparse.Namespace) -> int:
    from accelerate.config.config_file import ConfigFileError
    from accelerate.launch.plan import LaunchError

    try:
        plan = make_plan(args, os.environ)
    except (LaunchError, ConfigFileError) as exc:
        print(f"accelerate launch: error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print("accelerate launch --dry_run: nothing was started.\n")
        print(plan.describe())
        return 0
    for note in plan.notes:
        print(f"accelerate launch: {note}", file=sys.stderr)
    for warning in plan.warnings:
        print(f"accelerate launch: warning: {warning}", file=sys.stderr)
    from accelerate.launch.runner import run_plan

    return run_plan(plan)


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
    )
