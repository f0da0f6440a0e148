"""Multi-CPU launching through ``mpirun`` (Open MPI, MPICH or Intel MPI) on the hosts of a hostfile.

mpirun starts every process on every host; each one finds its rank in the MPI implementation's own
variables (``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``, ...), which :mod:`accelerate.state.environment`
reads, and meets the others at ``MASTER_ADDR:MASTER_PORT`` (gloo), which the command passes on.
The three implementations spell the same request differently, so the command is built per flavour.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

OPEN_MPI, MPICH, INTEL_MPI = "Open MPI", "MPICH", "Intel MPI"


class MpirunError(ValueError):
    """mpirun is missing, unrecognised, or the hostfile cannot be used."""


def find_mpirun(environ: Mapping[str, str]) -> str:
    found = shutil.which("mpirun", path=environ.get("PATH"))
    if found is None:
        raise MpirunError(
            "--mpirun_hostfile launches through mpirun, but no mpirun is on PATH. Install Open MPI "
            "(`apt-get install openmpi-bin`), MPICH (`apt-get install mpich`) or Intel MPI, or drop "
            "--mpirun_hostfile to launch with torch.distributed.run."
        )
    return found


def mpi_flavour(mpirun: str) -> str:
    """Which implementation ``mpirun`` belongs to, from its ``--version`` banner."""
    try:
        banner = subprocess.run(
            [mpirun, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MpirunError(f"`{mpirun} --version` failed ({exc}); cannot tell which MPI it is.") from None
    if "Open MPI" in banner or "OpenRTE" in banner or "Open RTE" in banner:
        return OPEN_MPI
    if "Intel(R) MPI" in banner or "Intel MPI" in banner:
        return INTEL_MPI
    if "HYDRA" in banner or "MPICH" in banner:
        return MPICH
    first = banner.strip().splitlines()[0] if banner.strip() else "(no output)"
    raise MpirunError(
        f"{mpirun} is neither Open MPI, MPICH nor Intel MPI (its --version says: {first}). Put one of those "
        "first on PATH, or drop --mpirun_hostfile."
    )


def first_host(hostfile: str) -> str:
    """The first host the file lists (where rank 0 runs): the rendezvous address by default."""
    path = Path(hostfile).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise MpirunError(f"--mpirun_hostfile {hostfile}: cannot be read ({exc}).") from None
    for line in lines:
        words = line.split("#", 1)[0].split()
        if words:
            # Open MPI: "host slots=N"; MPICH/Intel: "host:N".
            return words[0].split(":", 1)[0]
    raise MpirunError(f"--mpirun_hostfile {hostfile} lists no host; write one host name per line.")


def mpirun_command(
    *,
    mpirun: str,
    flavour: str,
    hostfile: str,
    num_processes: int,
    per_machine: int,
    env: Mapping[str, str],
    program: Sequence[str],
) -> list[str]:
    """The full mpirun command: ``num_processes`` processes, ``per_machine`` per host, ``env`` exported."""
    if flavour == OPEN_MPI:
        cmd = [
            mpirun,
            "--hostfile",
            hostfile,
            "-np",
            str(num_processes),
            "--map-by",
            f"ppr:{per_machine}:node",
        ]
        # Open MPI pins each process to one core by default; torch's intra-op threads need more room.
        cmd += ["--bind-to", "none"]
        # Open MPI forwards only what -x names to other hosts; locally the environment is inherited.
        for name, value in sorted(env.items()):
            cmd += ["-x", f"{name}={value}"]
    else:  # MPICH and Intel MPI share Hydra's spelling.
        cmd = [mpirun, "-f", hostfile, "-n", str(num_processes), "-ppn", str(per_machine)]
        for name, value in sorted(env.items()):
            cmd += ["-genv", name, value]
    return [*cmd, *program]


def mpirun_environ(flavour: str) -> dict[str, str]:
    """Variables mpirun itself needs. Open MPI refuses to run as root (containers, CI) unless told."""
    if flavour == OPEN_MPI and hasattr(os, "geteuid") and os.geteuid() == 0:
        return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return {}
