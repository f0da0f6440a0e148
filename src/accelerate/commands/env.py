"""``accelerate env``: a block to paste into a bug report (versions, devices, the config file)."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys
from typing import Any

HELP = "Print versions, devices and the config file, for bug reports."
OPTIONAL_PACKAGES = ("deepspeed", "torch_xla")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "env", help=HELP, description=HELP + " Paste its output into an issue.", allow_abbrev=False
    )
    parser.add_argument("--config_file", "--config-file", dest="config_file", default=None, metavar="PATH",
                        help="Config file to show (default: the one `accelerate launch` would read).")  # fmt: skip
    parser.set_defaults(func=run)
    return parser


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _accelerator_name(torch: Any) -> str:
    """Upstream's ``PyTorch accelerator`` value: the device type torch would run on, else ``N/A``."""
    if torch.cuda.is_available():
        return "CUDA"
    for name in ("xpu", "npu", "mlu", "musa", "sdaa", "hpu"):
        module = getattr(torch, name, None)
        if module is not None and getattr(module, "is_available", lambda: False)():
            return name.upper()
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "MPS"
    return "N/A"


def collect(config_file: str | None, environ: Any) -> list[tuple[str, str]]:
    """The report's rows, in order (a function so tests can check the content without parsing).

    Upstream's rows first, with its labels (bug-report templates and scripts read them), then ours.
    """
    import shutil

    from accelerate import __version__

    rows: list[tuple[str, str]] = [
        ("`Accelerate` version", __version__),
        ("Platform", platform.platform()),
        ("`accelerate` bash location", shutil.which("accelerate") or "not found on PATH"),
        ("Python version", platform.python_version()),
        ("Numpy version", _version("numpy")),
    ]
    extra: list[tuple[str, str]] = [
        # This module is accelerate/commands/env.py: two levels up is the package directory.
        ("accelerate location", os.path.dirname(os.path.dirname(__file__))),
        ("Python executable", sys.executable),
    ]
    # The optional backends, read from package metadata (importing torch_xla would claim the TPU).
    extra += [(name, _version(name)) for name in OPTIONAL_PACKAGES]
    gpu_type = None
    try:
        import torch

        rows.append(("PyTorch version", torch.__version__))
        rows.append(("PyTorch accelerator", _accelerator_name(torch)))
        extra.append(("torch CUDA build", torch.version.cuda or "none"))
        cuda = torch.cuda.is_available()
        extra.append(("CUDA available", str(cuda)))
        if cuda:
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            extra.append(("GPUs", f"{len(names)}: " + ", ".join(names)))
            gpu_type = torch.cuda.get_device_name()
            nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
            extra.append(("NCCL", ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl)))
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            extra.append(("XPU devices", str(xpu.device_count())))
        extra.append(("torch threads", str(torch.get_num_threads())))
    except Exception as exc:  # a broken torch install is exactly what a bug report should show
        rows.append(("PyTorch version", f"import failed: {type(exc).__name__}: {exc}"))
    try:
        import psutil

        rows.append(("System RAM", f"{psutil.virtual_memory().total / 1024**3:.2f} GB"))
    except Exception:
        pass
    if gpu_type is not None:
        rows.append(("GPU type", gpu_type))
    extra.append(("CPU", f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores"))
    for name in (
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "HF_HOME",
        "XDG_CACHE_HOME",
        "ACCELERATE_CONFIG_FILE",
    ):
        if environ.get(name) is not None:
            extra.append((name, environ[name]))
    accelerate_vars = sorted(
        k for k in environ if k.startswith("ACCELERATE_") and k != "ACCELERATE_CONFIG_FILE"
    )
    for name in accelerate_vars:
        extra.append((name, environ[name]))
    return rows + extra


def config_block(config_file: str | None, environ: Any) -> str:
    """``Config file: <where>`` and upstream's ``- `Accelerate` default config:`` block: one tab-indented
    ``- key: value`` line per key of the file (defaults filled in, as upstream), or ``Not found``."""
    from accelerate.config.config_file import ConfigFileError, locate_config_file

    title = "- `Accelerate` default config:"
    try:
        location = locate_config_file(config_file, environ)
    except ConfigFileError as exc:
        return f"- Config file: {exc}\n{title}\n\tNot found"
    if location.path is None:
        return f"- Config file: {location.description}\n{title}\n\tNot found"
    from accelerate.commands.config.config_args import load_config_from_file

    try:
        data = load_config_from_file(str(location.path)).to_dict()
    except (OSError, ValueError) as exc:
        return f"- Config file: {location.description}\n{title}\n\tcannot be read: {exc}"
    lines = "\n".join(f"\t- {key}: {value}" for key, value in data.items())
    return f"- Config file: {location.description}\n{title}\n{lines}"


def run(args: argparse.Namespace) -> int:
    rows = collect(args.config_file, os.environ)
    print("\nCopy-and-paste the text below in your GitHub issue\n")
    for name, value in rows:
        print(f"- {name}: {value}")
    print(config_block(args.config_file, os.environ))
    return 0
