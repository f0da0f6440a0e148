"""``accelerate launch --fault_tolerance --ft_*``: the flags, their launch-plan rows and the lighthouse.

Each ``accelerate launch`` runs one replica group; the flags reach the script as the
``ACCELERATE_FT_*`` variables, which ``LaunchEnv.fault_tolerance_settings()`` turns into a
``FaultToleranceKwargs``. ``--ft_start_lighthouse`` makes this launcher (the first group's, say)
start torchft's lighthouse on ``--ft_lighthouse`` for as long as it runs. No torch import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# name -> (argparse keywords, help); every name but ft_start_lighthouse is an env-contract field.
FLAGS: dict[str, tuple[dict[str, Any], str]] = {
    "fault_tolerance": ({"action": "store_true"}, "Run this launch as one replica group of a fault-tolerant run "
                        "(torchft; our addition): the healthy groups keep stepping while a failed one restarts and heals."),
    "ft_replica_group_id": ({"type": int, "metavar": "N"}, "This replica group's number, from 0 (keep it on restart)."),
    "ft_num_replica_groups": ({"type": int, "metavar": "N"}, "How many replica groups the run starts with."),
    "ft_lighthouse": ({"metavar": "HOST:PORT"}, "Address of torchft's lighthouse (the quorum server)."),
    "ft_start_lighthouse": ({"action": "store_true"}, "Start the lighthouse in this launcher, listening on --ft_lighthouse."),
    "ft_bind_address": ({"metavar": "HOST"}, "The address this group's servers listen on. Default 127.0.0.1 (loopback)."),
    "ft_min_replicas": ({"type": int, "metavar": "N"}, "The fewest healthy groups a step commits with. Default 1."),
    "ft_heartbeat_ms": ({"type": int, "metavar": "MS"}, "Heartbeat interval to the lighthouse. Default 100."),
    "ft_timeout_s": ({"type": int, "metavar": "S"}, "Timeout of a gradient exchange or a healing. Default 30."),
}  # fmt: skip

# (setting, default, config-file reader, env-contract field) rows for the launch plan.
SPEC_ROWS: tuple[tuple[str, Any, Any, str | None], ...] = tuple(
    (name, None, None, None if name == "ft_start_lighthouse" else name) for name in FLAGS
)


def problem(settings: Mapping[str, Any]) -> str | None:
    """Why the plan's ``--ft_*`` settings cannot run (one without ``--fault_tolerance``, no lighthouse), or None."""
    values = {name: settings[name].value for name in FLAGS}
    given = [name for name, value in values.items() if name.startswith("ft_") and value not in (None, False)]
    if given and not values.get("fault_tolerance"):
        return f"--{given[0]} needs --fault_tolerance."
    if values.get("fault_tolerance") and not values.get("ft_lighthouse"):
        return (
            "--fault_tolerance needs --ft_lighthouse HOST:PORT (with --ft_start_lighthouse on one launcher)."
        )
    return None


def start_lighthouse_for(values: dict[str, Any]) -> Any:
    """The lighthouse this launcher starts (``--ft_start_lighthouse``), or None."""
    if not values.get("ft_start_lighthouse"):
        return None
    from accelerate.backends.fault_tolerance.manager import start_lighthouse

    return start_lighthouse(
        str(values["ft_lighthouse"]), min_replicas=int(values.get("ft_min_replicas") or 1)
    )
