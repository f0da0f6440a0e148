"""What every launched process runs first: ``python -m accelerate.launch.bootstrap [-m] script args...``.

It runs the user's script (or module) exactly as ``python script.py args`` would (same ``sys.argv``,
``sys.path[0]`` and ``__name__ == "__main__"``), and when the script raises, it writes the traceback to
the per-rank error file torch's elastic agent names in ``TORCHELASTIC_ERROR_FILE``. That file is how the
launcher can print the failing rank's real traceback instead of a bare "ChildFailedError".

It imports neither torch nor the rest of accelerate, so it adds nothing to a process's start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import TracebackType

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
# Where the launcher's own stderr can be opened again (/proc/<pid>/fd/2) when this process's stderr
# passes through the launcher (accelerate.launch.worker_stderr): the only way left to say why this
# process stops once the launcher is dead.
LAUNCHER_STDERR_ENV = "ACCELERATE_LAUNCHER_STDERR"
# How often the watch looks at the parent: well inside the 2 s in which an orphan must be gone.
_PARENT_POLL_S = 0.2
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PDEATH_OFFSET = 5  # SIGRTMIN + 5: a real-time signal nothing else here uses


def _user_traceback(exc: BaseException) -> str:
    """The traceback without the bootstrap's and runpy's own frames (they are noise to the user)."""
    tb: TracebackType | None = exc.__traceback__
    ours = (__file__, runpy.__file__, "<frozen runpy>")
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def write_error_file(exc: BaseException, text: str, exit_code: int = 1) -> None:
    """Writes the failure in the JSON layout torch.distributed.elastic reads (ProcessFailure)."""
    path = os.environ.get(ERROR_FILE_ENV)
    if not path:
        return
    data = {
        "message": {
            "message": f"{type(exc).__name__}: {exc}",
            # torch reads "timestamp" as whole seconds; "time" orders ranks that failed within one second.
            "extraInfo": {
                "py_callstack": text,
                "timestamp": str(int(time.time())),
                "time": time.time(),
                # The status the rank exits with: the launcher reports it even when the agent's
                # SIGTERM catches the rank still shutting down.
                "exit_code": exit_code,
            },
        }
    }
    try:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(data, file)
    except OSError as err:  # the traceback still reaches stderr; losing the file only loses the summary
        print(f"accelerate: could not write the error file {path}: {err}", file=sys.stderr)


def _launcher_gone(launcher: int, out: int = 2) -> None:
    """Ends this process at once, saying why: a worker whose launcher died would train on unseen."""
    rank = os.environ.get("RANK", "?")
    try:
        os.write(
            out,
            f"accelerate: the launcher (pid {launcher}) is gone, so rank {rank} (pid {os.getpid()}) stops "
            "here instead of training on orphaned\n".encode(),
        )
    finally:
        os._exit(1)


def _open_launcher_stderr() -> int:
    """The launcher's own stderr, opened while the launcher lives (see LAUNCHER_STDERR_ENV); else 2."""
    path = os.environ.get(LAUNCHER_STDERR_ENV)
    if not path:
        return 2
    try:
        # O_APPEND: a log file the launcher's stderr was redirected to is written at its end.
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:  # a socket (journald) cannot be reopened: the message goes to our own stderr
        return 2


def watch_the_launcher() -> Callable[[], None]:
    """Makes this process end within 2 s of its launcher's death (SIGKILL included), with a line why.

    Everywhere, a daemon thread polls the parent's pid (a blocked collective releases the GIL, so it
    runs). On Linux the kernel also signals the parent's death (``PR_SET_PDEATHSIG``), which wakes a
    blocking system call at once. That signal is a real-time one of its own, not SIGTERM: the kernel
    sends it when the parent *thread* that started this process ends, which happens first when the
    launcher dies but also while it lives on, and torch's agent stops a group with SIGTERM; its
    handler therefore acts only once the parent process is really gone.

    Returns:
        A function that ends the watch (joined, so no accelerate thread is left at the interpreter's exit).
    """
    launcher = os.getppid()
    if launcher <= 1:
        return lambda: None  # started by init (or a container's pid 1): there is no launcher to outlive
    out = _open_launcher_stderr()
    if sys.platform.startswith("linux"):
        _set_parent_death_signal(launcher, out)
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(_PARENT_POLL_S):
            if os.getppid() != launcher:
                _launcher_gone(launcher, out)

    thread = threading.Thread(target=poll, name="accelerate-launcher-watch", daemon=True)
    thread.start()

    def end() -> None:
        stop.set()
        thread.join()

    return end


def _set_parent_death_signal(launcher: int, out: int) -> None:
    rtmin = getattr(signal, "SIGRTMIN", None)
    if rtmin is None:
        return
    signum = int(rtmin) + _PDEATH_OFFSET
    armed_in = os.getpid()  # a forked child (a DataLoader worker) inherits the handler, not the launcher

    def on_parent_death(_signum: int, _frame: object) -> None:
        if os.getpid() == armed_in and os.getppid() != launcher:
            _launcher_gone(launcher, out)

    try:
        import ctypes

        signal.signal(signum, on_parent_death)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError, ValueError):  # no prctl: the polling thread alone keeps the promise
        return
    if os.getppid() != launcher:  # died between reading the pid and arming the signal
        _launcher_gone(launcher, out)


def main(argv: list[str]) -> int:
    module = bool(argv) and argv[0] == "-m"
    if module:
        argv = argv[1:]
    if not argv:
        print("usage: python -m accelerate.launch.bootstrap [-m] SCRIPT_OR_MODULE [ARGS...]", file=sys.stderr)
        return 2
    target = argv[0]
    end_watch = watch_the_launcher()
    _record_progress_on_sigterm()
    try:
        return _run(module, target, argv)
    finally:
        end_watch()


def _run(module: bool, target: str, argv: list[str]) -> int:
    try:
        if module:
            sys.argv = [target, *argv[1:]]  # runpy replaces argv[0] with the module's file
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            # `python script.py` puts the script's folder first on sys.path, not the working directory.
            sys.argv = [target, *argv[1:]]
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            # Record when and where sys.exit(N) ended this rank: a peer that then fails on the closed
            # connection may end sooner (this rank still tears down), and only the recorded time
            # tells the launcher which rank failed first.
            code = exc.code if isinstance(exc.code, int) else 1  # sys.exit("message") exits with 1
            write_error_file(exc, _user_traceback(exc), exit_code=code)
        raise
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        _record_progress()
        _wait_for_the_hang_watchdog()
        text = _user_traceback(exc)
        write_error_file(exc, text)
        sys.stderr.write(text)
        sys.stderr.flush()
        return 1
    _leave_process_group_together()
    return 0


def _record_progress() -> None:
    """Leaves this process's optimizer-step count beside the checkpoints for the group that resumes
    (see accelerate.checkpointing.membership; looked up, not imported: a script without accelerate
    has nothing to record)."""
    membership = sys.modules.get("accelerate.checkpointing.membership")
    if membership is not None:
        membership.record_progress()


def _record_progress_on_sigterm() -> None:
    """Under restarts (elastic or not) the agent stops a group with SIGTERM: record, then die of it."""
    if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) <= 0:
        return

    def on_sigterm(signum: int, _frame: object) -> None:
        _record_progress()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # the exit status still says SIGTERM, as the agent expects

    with contextlib.suppress(ValueError, OSError):  # not the main thread: leave the default
        signal.signal(signal.SIGTERM, on_sigterm)


def _wait_for_the_hang_watchdog() -> None:
    """After this process reported a hang, an error in the main thread (a peer that already ended closed
    its connection) is a consequence, not news: let the watchdog end the process without a traceback."""
    watchdog = sys.modules.get("accelerate.diagnostics.watchdog")
    if watchdog is not None and watchdog.REPORTED.is_set():
        time.sleep(60)  # the watchdog ends the process (os._exit) within its grace period


def _leave_process_group_together() -> None:
    """After a script that succeeded: wait for every process, then tear the process group down.

    Without this, the first process to exit closes what the others still use at their own exit: the
    rendezvous store it hosts (mpirun, several machines) or its end of gloo's connections, and a process
    still tearing down aborts ("terminate called without an active exception", SIGABRT). A process that
    failed skips this; the launcher (torch.distributed.run or mpirun) stops the others.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    # A peer still stuck elsewhere must not leave this barrier waiting unreported: the hang watchdog
    # watches it like any collective (when the script used accelerate; looked up, not imported).
    watchdog = sys.modules.get("accelerate.diagnostics.watchdog")
    watched = (
        watchdog.SLOT.enter("barrier at the end of the script") if watchdog else contextlib.nullcontext()
    )
    try:
        with watched:
            dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:  # a process that already left: report, but the script itself succeeded
        print(f"accelerate: leaving the process group failed: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
