"""A warning for Linux kernels known to hang multi-process training."""

from __future__ import annotations

import logging
import platform
import re

# Upstream's logger name, so users' logging settings for it keep applying.
logger = logging.getLogger("accelerate.utils.other")

# Older kernels have been seen to make processes hang in collectives (gloo/NCCL over shared memory).
MIN_KERNEL = (5, 5, 0)


def _kernel_version(release: str) -> str | None:
    """The ``X.Y.Z`` in a kernel release string (``"5.4.0"`` in ``"5.4.0-35-generic"``; ``"6.8"`` is 6.8.0)."""
    match = re.search(r"\d+\.\d+(?:\.\d+)?", release)
    if match is None:
        return None
    version = match.group(0)
    return version if version.count(".") == 2 else version + ".0"


def check_os_kernel() -> None:
    """Logs a warning on Linux kernels older than 5.5.0 (a known cause of hanging processes).

    As upstream: called when an ``Accelerator`` is created; the message names the detected and the
    minimum version, on the main process only when a multi-process run is set up.

    Example:
        >>> check_os_kernel()  # silent on a recent kernel or off Linux
    """
    info = platform.uname()
    if info.system != "Linux":
        return
    version = _kernel_version(info.release)
    if version is None or tuple(int(part) for part in version.split(".")) >= MIN_KERNEL:
        return
    if not _on_main_process():
        return
    minimum = ".".join(map(str, MIN_KERNEL))
    logger.warning(
        f"Detected kernel version {version}, which is below the recommended minimum of {minimum}; this can "
        "cause the process to hang. It is recommended to upgrade the kernel to the minimum version or higher."
    )


def _on_main_process() -> bool:
    import os

    return os.environ.get("RANK", "0") in ("", "0")
