"""A small tmpfs for the project folder, so a ``disk_full`` fault fills a real file system.

Mounting needs root (CI runs as root); elsewhere the fault falls back to the worker's write hook
(ENOSPC raised by ``os.write`` for one planned file). Either way the error travels accelerate's
own storage code; the tmpfs makes the kernel raise it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

# Room for a few checkpoints of the example (tens of kB each) and the ballast's bookkeeping.
SIZE = "16m"
BALLAST = ".chaos-ballast"


@contextlib.contextmanager
def small_disk(folder: Path, wanted: bool) -> Iterator[Path | None]:
    """Mounts a tmpfs at ``folder`` (created) when ``wanted`` and allowed; yields the ballast path or None."""
    folder.mkdir(parents=True, exist_ok=True)
    if not wanted or os.geteuid() != 0:
        yield None
        return
    name = f"accelerate-chaos-{uuid.uuid4().hex[:8]}"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", name, str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:  # a container without CAP_SYS_ADMIN: the write hook stands in
        yield None
        return
    ballast = folder / BALLAST
    try:
        yield ballast
    finally:
        # The checks and a person reading a failed round want the files: they stay, on the real disk.
        ballast.unlink(missing_ok=True)
        kept = folder.with_name(folder.name + ".kept")
        shutil.copytree(folder, kept, symlinks=True)
        subprocess.run(["umount", "--lazy", str(folder)], capture_output=True)
        folder.rmdir()
        kept.rename(folder)
