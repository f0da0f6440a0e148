"""`install_xla` at upstream's path: installs torch_xla in a Colab or Kaggle notebook with a TPU.

Elsewhere it runs nothing and raises with the pip command to use: installing packages into a
user's environment behind their back is only reasonable in those throw-away notebook machines.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

# libtpu (the TPU runtime torch_xla[tpu] needs) is published on this index, not on PyPI.
LIBTPU_INDEX = "https://storage.googleapis.com/libtpu-releases/index.html"


def _notebook_host() -> str | None:
    """ "colab" or "kaggle" when running in one of them, else None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if "google.colab" in str(shell) or "COLAB_RELEASE_TAG" in os.environ:
        return "colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ:
        return "kaggle"
    return None


def xla_install_commands(upgrade: bool = False) -> list[list[str]]:
    """The pip commands ``install_xla`` runs: torch first when ``upgrade``, then the matching torch_xla."""
    pip = [sys.executable, "-m", "pip", "install"]
    commands = [[*pip, "-U", "torch"]] if upgrade else []
    torch_version = importlib.metadata.version("torch").split("+")[0]
    major_minor = ".".join(torch_version.split(".")[:2])
    # torch_xla releases follow torch's: 2.9.x goes with torch 2.9.
    commands.append([*pip, f"torch_xla[tpu]~={major_minor}.0", "-f", LIBTPU_INDEX])
    return commands


def install_xla(upgrade: bool = False) -> None:
    """Installs the torch_xla matching the installed torch (``upgrade=True``: upgrades torch first).

    Only in a Colab or Kaggle notebook; elsewhere it raises a RuntimeError with the command to run.

    Example:
        >>> from accelerate.utils import install_xla
        >>> install_xla()  # in a Colab TPU runtime, then restart the runtime
    """
    if _notebook_host() is None:
        command = " ".join(xla_install_commands(upgrade)[-1][1:]).replace("-m pip", "pip", 1)
        raise RuntimeError(
            "install_xla installs torch_xla only in a Colab or Kaggle notebook. Here, install it yourself: "
            f"{command} (with a torch_xla release matching your torch; PJRT_DEVICE=CPU runs it without a TPU)."
        )
    if upgrade:
        # The torch_xla to install depends on the torch version, so torch is upgraded (and re-read) first.
        subprocess.run(xla_install_commands(True)[0], check=True)
    subprocess.run(xla_install_commands(False)[-1], check=True)
