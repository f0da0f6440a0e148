"""Shutting the process's distributed machinery down in order, before the interpreter finalises.

Why this module exists (issue 19: a run that finished training aborted at exit with
``terminate called without an active exception``):

gloo runs every collective on its own C++ worker threads. When a collective on tensors that Python
created completes, the worker thread drops the work's last reference to those tensors, and doing so
takes the GIL. Once the interpreter has begun finalising, a thread that asks for the GIL is ended
with ``pthread_exit``; its unwinding meets a C++ destructor that may not throw, and the C++ runtime
calls ``std::terminate``: SIGABRT, after a script that returned normally. The worker threads live as
long as the C++ process group, and ``destroy_process_group()`` does not end them while anything else
(a ``DistributedDataParallel`` wrapper, above all) still holds the group.

The group must not die just anywhere either: its destructor joins those threads, so running it
under the GIL (a DDP wrapper freed in ordinary code holding the last reference) can deadlock with
a worker that waits for the GIL. accelerate therefore keeps a reference to every group it creates
(:mod:`accelerate.state.process_group`) and, at exit, while Python can still hand out the GIL,

1. stops and joins the background work the library started (thread pools registered here),
2. drops the references the library's own wrappers hold on the group,
3. destroys the group it created and drops its own references last, from Python, where the
   group's destructor joins gloo's threads with the GIL released.

Step 3 waits at most :data:`EXIT_JOIN_TIMEOUT_S`: a worker blocked in a collective that its peer
never joins (only after a failure elsewhere) must not turn a failed run into a hang.
"""

from __future__ import annotations

import atexit
import functools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

EXIT_JOIN_TIMEOUT_S = 30.0

_STOPPERS: list[Callable[[], None]] = []
_RELEASERS: list[tuple[weakref.ref[Any], Callable[[Any], None]]] = []
_LOCK = threading.Lock()
_EXIT_HANDLER_INSTALLED = False
_destroy_group: Callable[[], None] | None = None


def on_shutdown(stop: Callable[[], None]) -> None:
    """Registers ``stop``: it ends background work (and joins its threads) before the group goes.

    It runs on :func:`stop_background_work`, which ``destroy_process_group()`` and exit call; it
    must be safe to call more than once, and the work it stops must restart on its next use.
    """
    with _LOCK:
        if stop not in _STOPPERS:
            _STOPPERS.append(stop)


def release_at_exit(owner: T, release: Callable[[T], None]) -> None:
    """At exit, calls ``release(owner)`` if ``owner`` is still alive (weakly held until then).

    For wrappers that keep the process group alive (``DistributedDataParallel``): ``release`` drops
    their references so that destroying the group really ends its threads.
    """
    with _LOCK:
        _RELEASERS[:] = [(ref, fn) for ref, fn in _RELEASERS if ref() is not None]
        _RELEASERS.append((weakref.ref(owner), release))


def stop_background_work() -> None:
    """Stops every registered background worker (newest first); errors are reported, not raised."""
    with _LOCK:
        stoppers = list(reversed(_STOPPERS))
    for stop in stoppers:
        _run_reporting(stop, "stopping background work")


def install_exit_handler(destroy_group: Callable[[], None]) -> None:
    """Makes the ordered teardown run at interpreter exit, ending with ``destroy_group()``.

    Installed once per process (later calls only replace ``destroy_group``). ``destroy_group``
    destroys the group the library created and nothing else: a group the user made is theirs.
    """
    global _EXIT_HANDLER_INSTALLED, _destroy_group
    with _LOCK:
        _destroy_group = destroy_group
        if _EXIT_HANDLER_INSTALLED:
            return
        _EXIT_HANDLER_INSTALLED = True
    atexit.register(_at_exit)


def release_holders() -> None:
    """Calls every registered release now: the wrappers that held the group no longer do.

    At exit, and when a batch-size search replaces a group a failed attempt left unusable
    (:func:`accelerate.state.process_group.close_default_group`); the wrappers are unusable after.
    """
    with _LOCK:
        releasers, _RELEASERS[:] = list(_RELEASERS), []
    for ref, release in releasers:
        owner = ref()
        if owner is not None:
            _run_reporting(functools.partial(release, owner), "releasing the process group")
        del owner


def _finish_group() -> None:
    release_holders()
    if _destroy_group is not None:
        _run_reporting(_destroy_group, "destroying the process group")


def _at_exit() -> None:
    stop_background_work()
    _run_with_deadline(_finish_group, EXIT_JOIN_TIMEOUT_S)


def _run_with_deadline(work: Callable[[], None], seconds: float) -> None:
    """Runs ``work`` on a helper thread and waits at most ``seconds`` for it."""
    helper = threading.Thread(target=work, name="accelerate-teardown", daemon=True)
    try:
        helper.start()
    except RuntimeError:  # Python 3.12+ starts no threads once shutdown has begun: run it here
        work()
        return
    # Joined, not just waited for: no thread of ours may be left when finalisation begins.
    helper.join(seconds)
    if helper.is_alive():
        print(
            f"accelerate: the process group did not shut down within {seconds:.0f}s (a collective is "
            "probably still waiting for another rank); exiting without waiting for it.",
            file=sys.stderr,
            flush=True,
        )


def _run_reporting(step: Callable[[], None], what: str) -> None:
    # At exit an exception would be printed as "Exception ignored in atexit callback" with no
    # context; say which step failed instead, and carry on with the others.
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - teardown must reach its later steps
        print(
            f"accelerate: error while {what} at exit: {type(exc).__name__}: {exc}",
            file=sys.stderr,
            flush=True,
        )
