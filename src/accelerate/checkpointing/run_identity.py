"""Which run a process belongs to: the id a job records in its checkpoints and its project lock.

A *run* is one job as its user sees it: every rank of one launch, and, when torch's elastic agent
restarts the workers (``--max_restarts``, an elastic re-formation), the restarted ones too. The id
is process 0's: ``host-pid-start`` of the process that launched the workers (torch's agent, when
``TORCHELASTIC_RUN_ID`` says one did; it outlives the workers it restarts) or else of the process
itself. The other ranks adopt process 0's id (:func:`adopt_run_id`, after one exchange), so the
ranks of one job never count as two jobs. ``TORCHELASTIC_RUN_ID`` alone cannot serve: it is
``none`` for every static launch and the same for any two launches on one port.

A plain ``python train.py`` started again after a crash is a new run: it may resume the previous
run's checkpoints (the autoresume pattern), and :func:`note_resumed_run` says so in one warning
naming both runs, rather than refusing (README, "Restart and resume": refusing would break
that pattern for every restart that is not torch's own).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

logger = logging.getLogger("accelerate.checkpointing")

# The agent's variable: set in every worker torch's elastic agent (torchrun, accelerate launch) starts.
_AGENT_VARIABLE = "TORCHELASTIC_RUN_ID"
_run_id: tuple[int, str] | None = None  # (the process it was made in, the id): a fork makes its own


def _start_time(pid: int) -> int:
    """When process ``pid`` started, in seconds since the epoch (0 where ``/proc`` cannot say)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - a one-shot read
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the parenthesised name
        boot = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))  # noqa: SIM115
        return boot + ticks // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return 0


def run_id() -> str:
    """This process's run id (see the module docstring); the same on every rank once adopted."""
    global _run_id
    if _run_id is None or _run_id[0] != os.getpid():
        if os.environ.get(_AGENT_VARIABLE) is not None and os.getppid() > 1:
            pid = os.getppid()  # the agent: it restarts workers, so its id spans the restarts
            start = _start_time(pid)
        else:
            pid, start = os.getpid(), _start_time(os.getpid()) or int(time.time())
        _run_id = (os.getpid(), f"{socket.gethostname()}-{pid}-{start}")
    return _run_id[1]


def adopt_run_id(value: str) -> None:
    """Makes ``value`` (process 0's id) this process's run id."""
    global _run_id
    _run_id = (os.getpid(), value)


def agree_on_run_id(*, what: str) -> None:
    """One exchange: every rank adopts process 0's run id."""
    from accelerate.collectives.agreement import agree_on_failure

    views = agree_on_failure(None, what=what, payload=run_id())
    adopt_run_id(str(views[0]))


def note_resumed_run(path: Any, extra: dict[str, Any] | None) -> None:
    """Warns when the checkpoint ``load_state`` picked was written by another run (``extra``: its
    manifest's; None for a folder without one, which the loader already warned is unverified)."""
    if extra is None:
        return
    theirs = extra.get("run_id")
    mine = run_id()
    if theirs == mine:
        return
    who = f"run {theirs}" if theirs else "a run that did not record itself (an older accelerate)"
    logger.warning(
        "load_state: resuming from %s, written by %s; this is run %s. That is expected when a job is "
        "started again after it ended (a plain restart of the script is a new run). If that run was "
        "another job sharing this project_dir, these are its weights: load the checkpoint you mean by "
        "name (load_state('.../checkpoint_N')) and give each job its own ProjectConfiguration(project_dir=...).",
        path,
        who,
        mine,
    )
