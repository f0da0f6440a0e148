"""``accelerate test``: run the bundled self-check through the launcher with the user's config."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

HELP = "Run the bundled self-check through the launcher with your config."
SELF_CHECK_MODULE = "accelerate.test_utils.self_check"


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "test",
        help=HELP,
        description=HELP + " It checks process count and ranks, the device, every collective, dataloader "
        "sharding and gather_for_metrics, a short training run against a 1-process reference, mixed "
        "precision (if configured) and save/load, and ends with a verdict line. Under a config with a "
        "parallelism_config section the models are split on the tp sub-mesh first, as a script must.",
        allow_abbrev=False,
    )
    parser.add_argument("--config_file", "--config-file", dest="config_file", default=None, metavar="PATH",
                        help="Config file to test (default: the one `accelerate launch` would read).")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from accelerate.commands import launch as launch_command
    from accelerate.config.config_file import ConfigFileError
    from accelerate.launch.checks import LaunchError
    from accelerate.launch.runner import run_plan

    launch_args = argparse.Namespace(
        config_file=args.config_file, quiet=False, dry_run=False, module=True, no_python=False,
        training_script=SELF_CHECK_MODULE, training_script_args=[],
        **{name: None for name in launch_command.SETTING_FLAGS},
    )  # fmt: skip
    try:
        plan = launch_command.make_plan(launch_args, os.environ)
    except (LaunchError, ConfigFileError) as exc:
        print(f"accelerate test: error: {exc}", file=sys.stderr)
        return 2
    for warning in plan.warnings:
        print(f"accelerate test: warning: {warning}", file=sys.stderr)
    print(f"accelerate test: running the self-check on {plan.value('num_processes')} process(es) "
          f"({plan.config.description if plan.config else 'no config file'})", flush=True)  # fmt: skip
    code = run_plan(plan)
    if code == 0:
        print("accelerate test: success, your setup works.")
    else:
        print(
            f"accelerate test: FAILED (exit code {code}); see the table and tracebacks above.",
            file=sys.stderr,
        )
    return code
