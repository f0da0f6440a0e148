"""A warning for Linux kernels known to hang multi-process training."""

from __future__ import annotations

import logging
import platform
import re

logger = logging.getLogger(__name__)

# Older kernels have been seen to make processes hang in collectives (gloo/NCCL over shared memory).
MIN_KERNEL = (5, 5, 0)


def _kernel_version(release: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if match is None:
        return None
    return tuple(int(part or 0) for part in match.groups())


def check_os_kernel() -> None:
    """Logs a warning on Linux kernels older than 5.5.0 (a known cause of hanging processes)."""
    info = platform.uname()
    if info.system != "Linux":
        return
    version = _kernel_version(info.release)
    if version is not None and version < MIN_KERNEL:
        logger.warning(
            "Detected kernel version %s, which is below the recommended minimum of %s; this can cause "
            "the process to hang. Upgrade the kernel to %s or newer.",
            info.release,
            ".".join(map(str, MIN_KERNEL)),
            ".".join(map(str, MIN_KERNEL)),
        )
