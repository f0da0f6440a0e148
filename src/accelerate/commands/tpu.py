"""``accelerate tpu-config``: upstream runs set-up commands on every worker of a Google Cloud TPU pod.

The flags parse as upstream's, so a script written for upstream gets a clear answer instead of
"unrecognized arguments": XLA/TPU pods are not available in this accelerate, and nothing is run.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from accelerate.config.keys import TPU_POD, XLA

HELP = "Run set-up commands on the workers of a TPU pod (refused: TPU/XLA is not available here)."


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "tpu-config", help=HELP, description=HELP, allow_abbrev=False
    )

    def flag(name: str, **kwargs: Any) -> None:
        names = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
        parser.add_argument(*names, dest=name, **kwargs)

    flag("config_file", type=str, default=None, help="Config file with tpu_name, tpu_zone, commands.")
    flag("tpu_name", default=None, help="The TPU pod's name.")
    flag("tpu_zone", default=None, help="The TPU pod's zone.")
    flag("use_alpha", action="store_true", help="Use `gcloud alpha`.")
    flag("command_file", default=None, help="File of commands to run on each worker.")
    flag("command", action="append", nargs="+", help="A command to run on each worker.")
    flag("install_accelerate", action="store_true", help="Install accelerate on each worker first.")
    flag("accelerate_version", default="latest", help="Which accelerate to install.")
    flag("debug", action="store_true", help="Print the gcloud command instead of running it.")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    print(
        f"accelerate tpu-config: error: {TPU_POD}, and {XLA}; nothing was run. Run your set-up commands on the "
        "pod's workers with `gcloud compute tpus tpu-vm ssh --worker all --command ...` directly.",
        file=sys.stderr,
    )
    return 2
