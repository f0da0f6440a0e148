"""Executes a :class:`~accelerate.launch.plan.LaunchPlan`.

One process runs as a child of the launcher (so its environment is exactly what several processes
would get); several run under torch.distributed.run's elastic agent, hosted in this process so that a
failure arrives as data (which rank, exit code, the traceback the bootstrap wrote) rather than as a
wall of agent logs. Either way the launcher exits with the status of the process that failed first
(its exit code, or 128 + the signal that killed it); :mod:`accelerate.launch.failures` finds it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator, Mapping
from typing import TextIO

from accelerate.launch.elastic import MembershipLog, elastic_agent_env
from accelerate.launch.failures import ExitClock, describe_code, exit_code, report_failures
from accelerate.launch.hang_report import hang_env, report_hang
from accelerate.launch.plan import LaunchPlan
from accelerate.launch.restarts import reporting_restarts
from accelerate.launch.worker_stderr import StderrCapture


@contextlib.contextmanager
def patched_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Sets ``values`` in ``os.environ`` for the block (the elastic agent copies os.environ to workers).

    The whole environment is restored afterwards, including what torch's agent sets for itself
    (TORCHELASTIC_*), so a notebook kernel is left as it was.
    """
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


_FORWARDED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name)
)


@contextlib.contextmanager
def preserved_signals() -> Iterator[None]:
    """Restores the process's signal handlers after the block.

    torch's elastic agent installs its own SIGINT/SIGTERM/SIGHUP/SIGQUIT handlers and leaves them in
    place; in a notebook or a test session that would turn a later Ctrl-C into its SignalException.
    """
    saved = {sig: signal.getsignal(sig) for sig in _FORWARDED_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


@contextlib.contextmanager
def _forward_signals_to(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGTERM/SIGHUP sent to the launcher (scancel, docker stop, a job manager) reach the child too."""

    def forward(signum: int, frame: object) -> None:
        if process.poll() is None:
            process.send_signal(signum)

    names = ("SIGTERM", "SIGHUP")
    with preserved_signals():
        for sig in (getattr(signal, n) for n in names if hasattr(signal, n)):
            signal.signal(sig, forward)
        yield


def run_plan(plan: LaunchPlan, stderr: TextIO | None = None) -> int:
    """Runs the plan and returns the exit code the launcher should exit with (0 on success)."""
    err = stderr or sys.stderr
    if plan.mode in ("single", "mpirun", "xla"):
        return _run_single(plan, err)
    return _run_torchrun(plan, err)


def _run_single(plan: LaunchPlan, err: TextIO) -> int:
    # One process, or mpirun (which starts every process and exits with the first failure's status).
    env = {**os.environ, **plan.child_env, **plan.launcher_env}
    try:
        process = subprocess.Popen(plan.program, env=env)
    except FileNotFoundError:
        print(f"accelerate launch: cannot execute {plan.program[0]!r}: no such file.", file=err)
        return 127
    try:
        with _forward_signals_to(process):
            code = process.wait()
    except KeyboardInterrupt:
        # The child got the same Ctrl-C (same process group); give it a moment to unwind, then stop it.
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    if code != 0:
        what = "mpirun" if plan.mode == "mpirun" else "the process"
        # A signal (SIGKILL from the OOM killer, say) leaves no traceback; os._exit does not either.
        where = (
            "a signal ended it: no Python traceback"
            if code < 0
            else "its traceback, if it printed one, is above"
        )
        print(f"accelerate launch: {what} exited with {describe_code(code)} ({where}).", file=err)
    return exit_code(code)


# What torch's agent writes in its log folder besides the logs --tee / --redirects ask for: each failed
# worker's traceback, which the launcher reads for its failure summary (or its restart report).
_AGENT_ERROR_FILE = "error.json"


def remove_agent_log_folder(folder: str | None) -> None:
    """Removes ``folder``, the ``torchelastic_*`` folder torch's agent made in the temp dir (a launch
    without ``--log_dir``), unless it holds logs the user asked for (``--tee`` / ``--redirects``).

    Called once the launch has ended and its failures were reported: the error files were read then,
    and their path was never shown, so nothing else would read them. Kept, these folders piled up in
    the temp dir, one per failed launch.
    """
    if folder is None or not os.path.isdir(folder):
        return
    if all(name == _AGENT_ERROR_FILE for _, _, files in os.walk(folder) for name in files):
        shutil.rmtree(folder, ignore_errors=True)


def _run_torchrun(plan: LaunchPlan, err: TextIO) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, get_args_parser

    args = get_args_parser().parse_args(plan.torchrun_args)
    clock = ExitClock()
    membership = MembershipLog()
    # Each rank's hang watchdog writes its report there; one summary is printed from them.
    hang_dir = tempfile.TemporaryDirectory(prefix="accelerate-hang-")
    # The workers' stderr passes through this process, so that the last words of a worker that
    # crashed without a traceback (gloo's abort on mismatched sizes) reach the failure summary.
    capture = StderrCapture(hang_dir.name)
    child_env = {
        **plan.child_env,
        **hang_env(hang_dir.name, {**os.environ, **plan.child_env}),
        **capture.child_env(),
        **elastic_agent_env(plan.settings, os.environ),
    }
    with (
        hang_dir,
        patched_environ(child_env),
        preserved_signals(),
        clock.running(),
        reporting_restarts(err, clock.ended, membership),
        capture.running(),
    ):
        config, entrypoint, entry_args = config_from_args(args)
        # The folder torch's agent made for the workers' logs, when none was named (--log_dir): a
        # folder the user named is never removed.
        made_log_dir = None if args.log_dir else getattr(config.logs_specs, "root_log_dir", None)
        config.logs_specs = capture.logs_specs(config.logs_specs)
        try:
            elastic_launch(config, entrypoint)(*entry_args)
        except ChildFailedError as failure:
            tails = capture.finish()  # all the workers wrote is printed before the summary
            if membership.summary():
                print(membership.summary(), file=err)
            hung = report_hang(hang_dir.name, failure.failures, err)
            code = hung if hung is not None else report_failures(failure.failures, err, clock.ended, tails)
            if config.max_restarts > 0:
                print(
                    f"accelerate launch: no restarts left (--max_restarts {config.max_restarts} used up).",
                    file=err,
                )
            return code
        except KeyboardInterrupt:
            print("accelerate launch: interrupted; the processes were stopped.", file=err)
            return 130
        except Exception as exc:  # rendezvous timeouts, a store that cannot bind, ...: say what it was
            if type(exc).__name__ == "SignalException":
                print(f"accelerate launch: stopped by {exc}; the processes were stopped.", file=err)
                return 128 + int(getattr(getattr(exc, "sigval", None), "value", 15))
            # Unexpected: keep the traceback, it is the only clue to where torch's agent failed.
            traceback.print_exc(file=err)
            print(
                f"accelerate launch: the launch failed before or between processes: {type(exc).__name__}: {exc}",
                file=err,
            )
            return 1
        finally:
            remove_agent_log_folder(made_log_dir)  # after the summary, which read its error files
    if membership.summary():
        print(membership.summary(), file=err)
    return 0
