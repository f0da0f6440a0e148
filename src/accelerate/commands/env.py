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


def collect(config_file: str | None, environ: Any) -> list[tuple[str, str]]:
    """The report's rows, in order (a function so tests can check the content without parsing)."""
    import accelerate

    rows: list[tuple[str, str]] = [
        ("accelerate", f"{accelerate.__version__} ({os.path.dirname(accelerate.__file__)})"),
        ("Python", f"{platform.python_version()} ({sys.executable})"),
        ("Platform", platform.platform()),
        ("numpy", _version("numpy")),
    ]
    # The optional backends, read from package metadata (importing torch_xla would claim the TPU).
    rows += [(name, _version(name)) for name in OPTIONAL_PACKAGES]
    try:
        import torch

        rows.append(("torch", f"{torch.__version__} (CUDA build: {torch.version.cuda or 'none'})"))
        cuda = torch.cuda.is_available()
        rows.append(("CUDA available", str(cuda)))
        if cuda:
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            rows.append(("GPUs", f"{len(names)}: " + ", ".join(names)))
            nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
            rows.append(("NCCL", ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl)))
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            rows.append(("MPS available", "True"))
        xpu = getattr(torch, "xpu", None)
        if xpu is not None and xpu.is_available():
            rows.append(("XPU devices", str(xpu.device_count())))
        rows.append(("torch threads", str(torch.get_num_threads())))
    except Exception as exc:  # a broken torch install is exactly what a bug report should show
        rows.append(("torch", f"import failed: {type(exc).__name__}: {exc}"))
    rows.append(("CPU", f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores"))
    try:
        import psutil

        rows.append(("RAM", f"{psutil.virtual_memory().total / 2**30:.1f} GiB"))
    except Exception:
        pass
    for name in (
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "HF_HOME",
        "XDG_CACHE_HOME",
        "ACCELERATE_CONFIG_FILE",
    ):
        if environ.get(name) is not None:
            rows.append((name, environ[name]))
    accelerate_vars = sorted(
        k for k in environ if k.startswith("ACCELERATE_") and k != "ACCELERATE_CONFIG_FILE"
    )
    for name in accelerate_vars:
        rows.append((name, environ[name]))
    return rows


def config_block(config_file: str | None, environ: Any) -> str:
    from accelerate.config.config_file import ConfigFileError, locate_config_file

    try:
        location = locate_config_file(config_file, environ)
    except ConfigFileError as exc:
        return f"Config file: {exc}"
    if location.path is None:
        return f"Config file: {location.description}"
    try:
        text = location.path.read_text(encoding="utf-8").rstrip()
    except OSError as exc:
        return f"Config file: {location.description}: cannot read: {exc}"
    indented = "\n".join("    " + line for line in text.splitlines()) or "    (empty)"
    return f"Config file: {location.description}\n{indented}"


def run(args: argparse.Namespace) -> int:
    rows = collect(args.config_file, os.environ)
    width = max(len(name) for name, _ in rows) + 2
    print("Copy and paste the text below into your issue.\n")
    for name, value in rows:
        print(f"- {name + ':':<{width}}{value}")
    print("- " + config_block(args.config_file, os.environ))
    return 0
