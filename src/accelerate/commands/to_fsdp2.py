"""``accelerate to-fsdp2``: rewrites a config file's ``fsdp_config`` from FSDP1 keys to FSDP2 keys.

A pure file conversion (upstream's rules): ``fsdp_sharding_strategy`` becomes
``fsdp_reshard_after_forward`` (FULL_SHARD -> true, SHARD_GRAD_OP -> false), the keys FSDP2 has no use
for are dropped (each one is named), and ``fsdp_version: 2`` is set (the rules live in
:mod:`accelerate.backends.fsdp.convert`). Unconverted files run too: the
launcher translates FSDP1 settings onto FSDP2 itself (``accelerate launch --dry_run`` notes how).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HELP = "Convert a config file's fsdp_config from FSDP1 to FSDP2 keys."


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "to-fsdp2", help=HELP, description=HELP, allow_abbrev=False
    )
    parser.add_argument("--config_file", "--config-file", dest="config_file", type=str, required=True,
                        help="The config file to convert.")  # fmt: skip
    parser.add_argument("--output_file", "--output-file", dest="output_file", type=str, required=True,
                        help="Where to write the converted file.")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="Replace OUTPUT_FILE if it exists.")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from accelerate.backends.fsdp.convert import convert_fsdp_config
    from accelerate.config.config_file import ConfigFileError, read_raw

    output = Path(args.output_file)
    if output.exists() and not args.overwrite:
        print(
            f"accelerate to-fsdp2: error: {output} exists; pass --overwrite to replace it.", file=sys.stderr
        )
        return 2
    try:
        raw = read_raw(args.config_file)
        if not isinstance(raw.get("fsdp_config"), dict) or not raw["fsdp_config"]:
            raise ValueError(f"{args.config_file} has no fsdp_config to convert.")
        raw["fsdp_config"], changes = convert_fsdp_config(raw["fsdp_config"])
    except (ConfigFileError, ValueError) as exc:
        print(f"accelerate to-fsdp2: error: {exc}", file=sys.stderr)
        return 2
    import yaml

    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(yaml.safe_dump(raw, sort_keys=True, default_flow_style=False), encoding="utf-8")
    for change in changes:
        print(f"accelerate to-fsdp2: {change}")
    print(f"accelerate to-fsdp2: wrote {output}")
    return 0
