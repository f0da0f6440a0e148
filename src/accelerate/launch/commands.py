"""The command lines a launch plan runs: the bootstrap program, torch.distributed.run's arguments, mpirun's."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from accelerate.launch.checks import LaunchError
from accelerate.launch.elastic import nnodes_arg

if TYPE_CHECKING:
    from accelerate.launch.plan import Setting

BOOTSTRAP_MODULE = "accelerate.launch.bootstrap"
# torch.distributed.run options that only its agent understands (a one-process launch then runs under it too).
TORCHRUN_ONLY = ("tee", "log_dir", "role")


def program(script: str, script_args: Sequence[str], module: bool, no_python: bool) -> list[str]:
    if no_python:
        return [script, *script_args]
    return [sys.executable, "-u", "-m", BOOTSTRAP_MODULE, *(["-m"] if module else []), script, *script_args]


def mpirun_program(
    settings: dict[str, Setting], child_env: dict[str, str], program: list[str], environ: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The mpirun command; the processes meet at main_process_ip:port (default: the hostfile's first host)."""
    from accelerate.launch import mpirun
    from accelerate.launch.plan import Setting  # plan imports this module

    hostfile = str(settings["mpirun_hostfile"].value)
    try:
        executable = mpirun.find_mpirun(environ)
        if not Path(hostfile).expanduser().is_file():
            source = settings["mpirun_hostfile"].source
            raise mpirun.MpirunError(f"mpirun_hostfile={hostfile} (from {source}): no such file.")
        flavour = mpirun.mpi_flavour(executable)
        if settings["main_process_ip"].source == "default" and int(settings["num_machines"].value) > 1:
            settings["main_process_ip"] = Setting(
                "main_process_ip", mpirun.first_host(hostfile), f"default (first host of {hostfile})"
            )
    except mpirun.MpirunError as exc:
        raise LaunchError(str(exc)) from None
    child_env["MASTER_ADDR"] = str(settings["main_process_ip"].value)
    child_env["MASTER_PORT"] = str(settings["main_process_port"].value)
    machines = int(settings["num_machines"].value)
    procs = int(settings["num_processes"].value)
    command = mpirun.mpirun_command(
        mpirun=executable, flavour=flavour, hostfile=hostfile, num_processes=procs,
        per_machine=procs // machines, env=child_env, program=program,
    )  # fmt: skip
    return command, mpirun.mpirun_environ(flavour)


def single_machine_hosts_store(settings: dict[str, Setting], backend: str) -> str:
    """The rdzv_conf to pass; on one machine, c10d must host its store itself (``is_host=1``).

    Without it, torch's c10d rendezvous that cannot bind its port (another run took it after the
    port was checked) silently joins that run's store as a client, and the two runs mix.
    """
    conf = str(settings["rdzv_conf"].value or "")
    if backend != "c10d" or int(settings["num_machines"].value) != 1 or "is_host" in conf:
        return conf
    return f"{conf},is_host=1" if conf else "is_host=1"


def torchrun_args(
    settings: dict[str, Setting], script: str, script_args: Sequence[str], module: bool, no_python: bool
) -> list[str]:
    machines = int(settings["num_machines"].value)
    per_machine = int(settings["num_processes"].value) // machines
    ip, port = settings["main_process_ip"].value, int(settings["main_process_port"].value)
    backend = str(settings["rdzv_backend"].value)
    args = [
        "--nnodes", nnodes_arg(settings),
        "--nproc_per_node", str(per_machine),
        "--node_rank", str(settings["machine_rank"].value),
        "--master_addr", str(ip),
        "--master_port", str(port),
        "--rdzv_backend", backend,
        "--max_restarts", str(settings["max_restarts"].value),
        "--monitor_interval", str(settings["monitor_interval"].value),
    ]  # fmt: skip
    if backend != "static":
        # Dynamic rendezvous finds the others through this endpoint; the run id must match on every machine.
        args += ["--rdzv_endpoint", f"{ip}:{port}", "--rdzv_id", f"accelerate-{port}"]
    rdzv_conf = single_machine_hosts_store(settings, backend)
    if rdzv_conf:
        args += ["--rdzv_conf", rdzv_conf]
    for name in TORCHRUN_ONLY:
        if settings[name].value is not None:
            args += [f"--{name}", str(settings[name].value)]
    if no_python:
        return [*args, "--no_python", script, *script_args]
    return [*args, "--module", BOOTSTRAP_MODULE, *(["-m"] if module else []), script, *script_args]
