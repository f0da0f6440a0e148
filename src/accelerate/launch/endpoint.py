"""Where the processes meet: ``main_process_ip`` and ``main_process_port`` of a launch plan.

On one machine a busy or unset port is replaced by a free one (noted in the plan); on several, every
machine must be given the same port, and machine 0, which listens on it, needs it free. A dry run
(``--dry_run``) binds nothing, so there a busy port is a warning line of the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from accelerate.launch.checks import LaunchError
from accelerate.utils.ports import DEFAULT_PORT, find_free_port

if TYPE_CHECKING:
    from accelerate.launch.plan import Setting


def resolve_endpoint(
    settings: dict[str, Setting],
    notes: list[str],
    check_port: Callable[[int], bool] | None,
    *,
    dry_run: bool = False,
) -> list[str]:
    """Sets the rendezvous address and port; returns the warnings to show (a dry run's busy port).

    Raises:
        LaunchError: port 0 on several machines, or (not in a dry run) a busy port machine 0 must listen on.
    """
    from accelerate.launch.plan import Setting  # plan imports this module

    machines = int(settings["num_machines"].value)
    ip = settings["main_process_ip"]
    if ip.value is None:
        settings["main_process_ip"] = Setting("main_process_ip", "127.0.0.1", "default")
    port = settings["main_process_port"]
    rank = int(settings["machine_rank"].value)
    if port.value is None or int(port.value) == 0:
        if port.value is not None and int(port.value) == 0 and machines > 1:
            raise LaunchError(
                f"main_process_port=0 (from {port.source}) lets each machine pick its own port, so the machines "
                "could not find each other. Pass the same --main_process_port to every machine."
            )
        chosen, source = DEFAULT_PORT, "default"
        if machines == 1 and check_port is not None and (port.value == 0 or not check_port(DEFAULT_PORT)):
            chosen = find_free_port()
            source = (
                f"default (a free port; {DEFAULT_PORT} is in use)"
                if port.value is None
                else f"{port.source}: free port"
            )
            notes.append(f"main_process_port: using free port {chosen}.")
        settings["main_process_port"] = Setting("main_process_port", chosen, source)
        port = settings["main_process_port"]
    # Only machine 0 listens on the port; the others connect to it, so there it must be in use.
    if (
        rank == 0
        and check_port is not None
        and not port.source.startswith("default (a free")
        and not check_port(int(port.value))
    ):
        busy = f"main_process_port={port.value} (from {port.source}) is already in use on this machine"
        if dry_run:  # nothing will listen on it; the launch itself would stop here
            return [
                f"{busy}: a launch would stop here unless it is freed by then. Pass a free port with "
                "--main_process_port, or leave it out on a single machine to have one chosen."
            ]
        raise LaunchError(
            f"{busy} (another run, or a process that did not exit?). Pass a free port with --main_process_port, "
            "or leave it out on a single machine to have one chosen."
        )
    return []
