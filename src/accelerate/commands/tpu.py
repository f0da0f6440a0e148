"""``accelerate tpu-config``: runs set-up commands on every worker of a Google Cloud TPU pod.

It builds one ``gcloud compute tpus tpu-vm ssh NAME --zone ZONE --command "..." --worker all`` call
from the flags and the config file (flags win): the pod's name and zone (``tpu_name``, ``tpu_zone``),
the commands (``--command``, repeatable, or ``--command_file``; ``commands`` / ``command_file`` in the
config), and optionally installing accelerate first. ``--debug`` prints the command without running it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from typing import Any

HELP = "Run set-up commands on every worker of a TPU pod (through gcloud)."


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tpu-config", help=HELP, description=HELP, allow_abbrev=False
    )

    def flag(name: str, **kwargs: Any) -> None:
        names = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
        parser.add_argument(*names, dest=name, **kwargs)

    flag("config_file", type=str, default=None, help="Config file with tpu_name, tpu_zone, commands.")
    flag("tpu_name", default=None, help="The TPU pod's name (default: tpu_name from the config file).")
    flag("tpu_zone", default=None, help="The TPU pod's zone (default: tpu_zone from the config file).")
    flag("use_alpha", action="store_true", help="Use `gcloud alpha` instead of `gcloud`.")
    flag("command_file", default=None, help="File of commands to run on each worker, one per line.")
    flag("command", action="append", nargs="+", help="A command to run on each worker (repeatable).")
    flag("install_accelerate", action="store_true", help="Install accelerate on each worker first.")
    flag("accelerate_version", default="latest",
         help="With --install_accelerate: 'latest' (default), 'dev' (from the main branch), or a version.")  # fmt: skip
    flag("debug", action="store_true", help="Print the gcloud command instead of running it.")
    parser.set_defaults(func=run)
    return parser


class TPUConfigError(ValueError):
    """A tpu-config request that lacks something (the pod's name, zone, or any command)."""


def _config(path: str | None) -> Any:
    from accelerate.config.config_file import load_config_file, locate_config_file

    location = locate_config_file(path, os.environ)
    return load_config_file(location.path) if location.path is not None else None


def _read_lines(path: str, where: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as file:
            return [line.strip() for line in file if line.strip()]
    except OSError as exc:
        raise TPUConfigError(f"{where}={path}: cannot read it ({exc.strerror}).") from None


def _install_command(version: str) -> str:
    if version == "latest":
        return "pip install -U accelerate"
    if version == "dev":
        return "pip install git+https://github.com/huggingface/accelerate.git"
    return f"pip install accelerate=={version}"


def build_command(args: argparse.Namespace, config: Any = None) -> list[str]:
    """The gcloud command line (flags first, then the config file's values)."""
    name = args.tpu_name or (config.tpu_name if config is not None else None)
    zone = args.tpu_zone or (config.tpu_zone if config is not None else None)
    missing = [label for label, value in (("--tpu_name", name), ("--tpu_zone", zone)) if not value]
    if missing:
        raise TPUConfigError(
            f"{' and '.join(missing)} not given: pass {' and '.join(missing)}, or set "
            f"{' and '.join(m.lstrip('-') for m in missing)} in the config file (`accelerate config`)."
        )
    if args.command:
        commands = [" ".join(parts) for parts in args.command]
    elif args.command_file:
        commands = _read_lines(args.command_file, "--command_file")
    elif config is not None and config.commands:
        commands = [str(c) for c in config.commands]
    elif config is not None and config.command_file:
        commands = _read_lines(str(config.command_file), "command_file (from the config file)")
    else:
        raise TPUConfigError(
            "no command to run: pass --command CMD (repeatable) or --command_file FILE, or set commands / "
            "command_file in the config file."
        )
    # Each worker starts in its home folder; upstream runs the commands from /usr/share.
    steps = ["cd /usr/share"]
    if args.install_accelerate:
        steps.append(_install_command(args.accelerate_version))
    steps += commands
    gcloud = ["gcloud", *(["alpha"] if args.use_alpha else [])]
    return [*gcloud, "compute", "tpus", "tpu-vm", "ssh", str(name), "--zone", str(zone),
            "--command", "; ".join(steps), "--worker", "all"]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from accelerate.config.config_file import ConfigFileError

    try:
        command = build_command(args, _config(args.config_file))
    except (TPUConfigError, ConfigFileError) as exc:
        print(f"accelerate tpu-config: error: {exc}", file=sys.stderr)
        return 2
    if args.debug:
        print(f"Running {shlex.join(command)}")
        return 0
    try:
        code = subprocess.run(command, check=False).returncode
    except FileNotFoundError:
        print(
            "accelerate tpu-config: error: gcloud is not installed (https://cloud.google.com/sdk/docs/install); "
            f"the command was: {shlex.join(command)}",
            file=sys.stderr,
        )
        return 127
    if code == 0:
        print("Successfully set up the pod.")
    return code
