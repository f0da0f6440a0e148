"""``accelerate config`` (questions), ``accelerate config default`` and ``accelerate config update``.

The questionnaire asks only what follows from earlier answers (no machine-rank question for one
machine, no GPU-id question for CPU runs) and writes a file in Hugging Face Accelerate's format.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from accelerate.commands.config_backends import (
    ask_deepspeed,
    ask_downcast_bf16,
    ask_fsdp,
    ask_parallelism,
    ask_xla,
    package_available,
)
from accelerate.commands.prompts import Prompter, QuestionnaireAborted
from accelerate.utils.dataclasses import AVAILABLE_MIXED_PRECISION_MODES

HELP = "Write a launch config file (interactive, or `config default`)."
DYNAMO_BACKEND_CHOICES = ("inductor", "eager", "aot_eager", "cudagraphs", "onnxrt", "tensorrt", "ipex", "tvm")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "config",
        help=HELP,
        description="Answer a few questions about this machine and write the launch config file that "
        "`accelerate launch` reads by default.",
        allow_abbrev=False,
    )
    _config_file_arg(parser)
    parser.set_defaults(func=run_questionnaire)
    sub = parser.add_subparsers(dest="config_command", metavar="<subcommand>")
    default = sub.add_parser(
        "default", help="Write a sensible config for this machine without questions.", allow_abbrev=False
    )
    _config_file_arg(default)
    default.add_argument("--mixed_precision", "--mixed-precision", dest="mixed_precision", default="no",
                         type=str.lower, choices=AVAILABLE_MIXED_PRECISION_MODES, help="Mixed precision mode (default no).")  # fmt: skip
    default.set_defaults(func=run_default)
    update = sub.add_parser(
        "update", help="Rewrite an existing config file in the current schema.", allow_abbrev=False
    )
    _config_file_arg(update)
    update.set_defaults(func=run_update)
    return parser


def _config_file_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config_file", "--config-file", dest="config_file", default=None, metavar="PATH",
                        help="Where the file goes (default: $HF_HOME/accelerate/default_config.yaml, else "
                        "$XDG_CACHE_HOME/huggingface/accelerate/..., else ~/.cache/huggingface/accelerate/...).")  # fmt: skip


def _target(config_file: str | None, environ: Mapping[str, str]) -> Path:
    from accelerate.config.config_file import default_config_path

    return Path(config_file).expanduser() if config_file else default_config_path(environ)


def _gpu_count() -> int:
    from accelerate.launch.plan import visible_gpu_count

    return visible_gpu_count(os.environ)


# --- the questionnaire ----------------------------------------------------------------------------------
def _machine_choices(xla_available: bool) -> list[tuple[str, str]]:
    # The sharding backends are values of this one question (as distributed_type is in the file), so a
    # config can never ask for FSDP and DeepSpeed together; new entries go last to keep the numbering.
    missing = "" if package_available("deepspeed") else " (not installed here: pip install deepspeed)"
    choices = [
        ("NO", "No distributed training"),
        ("MULTI_CPU", "multi-CPU"),
        ("MULTI_GPU", "multi-GPU"),
        ("FSDP", "FSDP: fully sharded data parallel"),
        ("DEEPSPEED", f"DeepSpeed ZeRO{missing}"),
    ]
    if xla_available:
        choices.append(("XLA", "TPU / XLA device (torch_xla)"))
    return choices


def _one_machine(**values: Any) -> dict[str, Any]:
    """A config file's content for one machine: ``values`` over the settings both questionnaire and default share."""
    return {
        "compute_environment": "LOCAL_MACHINE",
        "num_machines": 1,
        "machine_rank": 0,
        "debug": False,
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "downcast_bf16": "no",
        "enable_cpu_affinity": False,
        **values,
    }


def ask_questions(prompter: Prompter, gpu_count: int, xla_available: bool | None = None) -> dict[str, Any]:
    """Asks the questions and returns the config file's content (upstream key names).

    ``xla_available`` (default: whether torch_xla is installed) decides whether TPU / XLA is offered.
    """
    if xla_available is None:
        xla_available = package_available("torch_xla")
    machine = prompter.select(
        "Which type of machine are you using?",
        _machine_choices(xla_available),
        default="MULTI_GPU" if gpu_count > 1 else "NO",
    )
    backend = machine if machine in ("FSDP", "DEEPSPEED") else None
    if backend is not None:
        machine = prompter.select(
            "Where will the processes run?",
            [("MULTI_GPU", "GPUs"), ("MULTI_CPU", "CPU processes")],
            default="MULTI_GPU" if gpu_count > 0 else "MULTI_CPU",
        )
    data = _one_machine(distributed_type=machine, num_processes=1, use_cpu=machine == "MULTI_CPU")
    if machine == "XLA":
        return _ask_xla_file(prompter, data)
    if machine != "NO":
        _ask_machines(prompter, data)
        machines = int(data["num_machines"])
        per_machine = gpu_count if machine == "MULTI_GPU" and gpu_count > 0 else 2

        def whole_machines(value: int) -> str | None:
            if value < 1:
                return "Please give at least 1 process."
            if value % machines:
                return f"The total must be a multiple of the number of machines ({machines})."
            return None

        data["num_processes"] = prompter.integer(
            "How many processes in total, over all machines?", per_machine * machines, whole_machines
        )
        if machine == "MULTI_GPU":
            data["gpu_ids"] = prompter.text(
                "Which GPUs (by id) should this machine use? A comma-separated list, or 'all'", "all"
            )
        data["debug"] = prompter.confirm(
            "Check distributed operations for errors (shape mismatches) while running? Slower, but turns "
            "hangs into clear errors.",
            False,
        )
    elif gpu_count > 0:
        data["use_cpu"] = prompter.confirm("Run on CPU only, even though a GPU is available?", False)
    if prompter.confirm("Do you wish to optimize your script with torch dynamo (torch.compile)?", False):
        data["dynamo_config"] = _ask_dynamo(prompter)
    if backend == "FSDP":
        data["distributed_type"] = "FSDP"
        data["fsdp_config"] = ask_fsdp(prompter, use_cpu=bool(data["use_cpu"]))
    elif backend == "DEEPSPEED":
        data["distributed_type"] = "DEEPSPEED"
        data["deepspeed_config"] = ask_deepspeed(prompter)
    if int(data["num_processes"]) > 1:
        parallelism = ask_parallelism(
            prompter, int(data["num_processes"]), bool(data["use_cpu"]), backend == "DEEPSPEED"
        )
        if parallelism is not None:
            data["parallelism_config"] = parallelism
    data["mixed_precision"] = prompter.select(
        "Do you wish to use mixed precision?", [(m, m) for m in AVAILABLE_MIXED_PRECISION_MODES], default="no"
    )
    return data


def _ask_xla_file(prompter: Prompter, data: dict[str, Any]) -> dict[str, Any]:
    ask_xla(prompter, data)
    data["mixed_precision"] = prompter.select(
        "Do you wish to use mixed precision?", [(m, m) for m in ("no", "bf16")], default="no"
    )
    if data["mixed_precision"] == "bf16":
        data["downcast_bf16"] = ask_downcast_bf16(prompter)
    return data


def _ask_machines(prompter: Prompter, data: dict[str, Any]) -> None:
    machines = prompter.integer(
        "How many different machines will you use (use more than 1 for multi-node training)?",
        1,
        lambda v: None if v >= 1 else "Please give at least 1 machine.",
    )
    data["num_machines"] = machines
    if machines == 1:
        return
    data["machine_rank"] = prompter.integer(
        "What is the rank of this machine?",
        0,
        lambda v: None if 0 <= v < machines else f"The rank must be between 0 and {machines - 1}.",
    )
    data["main_process_ip"] = prompter.text(
        "What is the IP address of the machine that runs rank 0?", "127.0.0.1"
    )
    data["main_process_port"] = prompter.integer(
        "What port will the machines use to reach it?",
        29500,
        lambda v: None if 1 <= v <= 65535 else "A port is a number from 1 to 65535.",
    )
    data["same_network"] = prompter.confirm("Are all the machines on the same local network?", True)
    data["rdzv_backend"] = prompter.select(
        "What rendezvous backend will you use?",
        [("static", "static"), ("c10d", "c10d")],
        default="static",
    )


def _ask_dynamo(prompter: Prompter) -> dict[str, Any]:
    backend = prompter.select(
        "Which dynamo backend would you like to use?",
        [(b, b) for b in DYNAMO_BACKEND_CHOICES],
        default="inductor",
    )
    config: dict[str, Any] = {"dynamo_backend": backend.upper()}
    if prompter.confirm("Do you want to customize the defaults sent to torch.compile?", False):
        config["dynamo_mode"] = prompter.select(
            "Which mode do you want to use?",
            [(m, m) for m in ("default", "reduce-overhead", "max-autotune")],
            default="default",
        )
        config["dynamo_use_fullgraph"] = prompter.confirm(
            "Compile the whole model as one graph (fullgraph)?", False
        )
        config["dynamo_use_dynamic"] = prompter.confirm("Enable dynamic shape tracing?", False)
    return config


def run_questionnaire(args: argparse.Namespace, prompter: Prompter | None = None) -> int:
    from accelerate.commands.prompts import default_prompter
    from accelerate.config.config_file import config_from_dict, save_config_file

    target = _target(args.config_file, os.environ)
    try:
        data = ask_questions(prompter or default_prompter(), _gpu_count())
    except QuestionnaireAborted as exc:
        print(f"\naccelerate config: stopped ({exc}); nothing was written.", file=sys.stderr)
        return 1
    path = save_config_file(config_from_dict(data, str(target)), target)
    print(f"accelerate configuration saved at {path}")
    return 0


# --- config default / config update -----------------------------------------------------------------
def default_config_data(mixed_precision: str, gpu_count: int) -> dict[str, Any]:
    """What `accelerate config default` writes: every visible GPU, or one CPU process."""
    data = _one_machine(
        distributed_type="MULTI_GPU" if gpu_count > 1 else "NO",
        num_processes=max(gpu_count, 1),
        use_cpu=gpu_count == 0,
        mixed_precision=mixed_precision,
    )
    if gpu_count > 0:
        data["gpu_ids"] = "all"
    return data


def run_default(args: argparse.Namespace, gpu_count: Callable[[], int] = _gpu_count) -> int:
    from accelerate.config.config_file import config_from_dict, save_config_file

    target = _target(args.config_file, os.environ)
    if target.exists():
        print(
            f"accelerate config default: {target} already exists and was left unchanged. Delete it first, "
            "or write elsewhere with --config_file.",
            file=sys.stderr,
        )
        return 1
    path = save_config_file(config_from_dict(default_config_data(args.mixed_precision, gpu_count())), target)
    print(f"accelerate configuration saved at {path}")
    return 0


def write_basic_config(mixed_precision: str = "no", save_location: str | None = None) -> Path | bool:
    """Writes the default launch config (``accelerate config default``) from Python.

    Args:
        mixed_precision: ``"no"``, ``"fp16"`` or ``"bf16"``.
        save_location: the file to write (default: the default config location).

    Returns:
        The file written, or False when one already exists there (it is left unchanged, as upstream).
    """
    from accelerate.config.config_file import config_from_dict, save_config_file
    from accelerate.utils.dataclasses import check_mixed_precision

    mode = check_mixed_precision(
        mixed_precision, origin=f"write_basic_config(mixed_precision={mixed_precision!r})"
    )
    target = _target(save_location, os.environ)
    if target.exists():
        print(f"write_basic_config: {target} already exists and was left unchanged; delete it to write anew.")
        return False
    return save_config_file(config_from_dict(default_config_data(mode, _gpu_count())), target)


def run_update(args: argparse.Namespace) -> int:
    from accelerate.config.config_file import (
        ConfigFileError,
        config_from_dict,
        detect_schema_version,
        locate_config_file,
        migrate,
        read_raw,
        save_config_file,
    )

    try:
        location = locate_config_file(args.config_file, os.environ)
        if location.path is None:
            raise ConfigFileError(f"there is nothing to update: {location.description}.")
        raw = read_raw(location.path)
        version = detect_schema_version(raw)
        _, changes = migrate(raw)
        config = config_from_dict(raw, str(location.path))
    except ConfigFileError as exc:
        print(f"accelerate config update: error: {exc}", file=sys.stderr)
        return 1
    save_config_file(config, location.path)
    if changes:
        print(f"Updated {location.path} from schema version {version}:")
        for change in changes:
            print(f"  {change}")
    else:
        print(f"{location.path} was already in the current schema; rewrote it in the canonical layout.")
    return 0


# --- upstream's module-level names (transformers and other clients import them from here) ----------
# The package mirrors upstream's layout: config_args (config classes, default locations), cluster,
# sagemaker, default, update, config (the command) and config_utils; their names re-export what is here.
def __getattr__(name: str) -> Any:
    # default_config_file is computed on access, so a changed HF_HOME is seen (upstream fixes it at import).
    if name == "default_config_file":
        from accelerate.commands.config import config_args

        return config_args.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_config_from_file(config_file: str | None) -> Any:
    """The launch config at ``config_file`` (default: the default location), as upstream's helper.

    Returns a :class:`~accelerate.commands.config.config_args.ClusterConfig` (or ``SageMakerConfig``
    for an ``AMAZON_SAGEMAKER`` file); its attributes are upstream's keys.

    Raises:
        FileNotFoundError: ``config_file`` was given but does not exist, or no default file exists.
    """
    from accelerate.commands.config.config_args import load_config_from_file as load

    return load(config_file)


def get_config_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """Upstream's builder of the ``config`` parser (with ``default`` and ``update``), standalone or as a
    subcommand of ``subparsers``."""
    if subparsers is None:
        subparsers = argparse.ArgumentParser(prog="accelerate", allow_abbrev=False).add_subparsers()
    return add_parser(subparsers)


def _subcommand_parser(subparsers: Any, name: str) -> argparse.ArgumentParser:
    """The parser of ``config <name>`` (``default``, ``update``), in a new ``config`` parser or one added
    to ``subparsers``."""
    config_parser = get_config_parser(subparsers)
    for action in config_parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[name]
            return found
    raise LookupError(f"the config parser has no {name!r} subcommand")


def main() -> int:
    """``accelerate-config`` (upstream's entry point here): runs the config command on ``sys.argv``."""
    from accelerate.commands.accelerate_cli import config_script

    return config_script()
