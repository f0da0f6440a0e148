"""Launched by tests/state/test_exit.py: runs a script, then reports the threads still alive at exit.

``python threads_at_exit.py SCRIPT [ARGS...]`` runs SCRIPT as ``python SCRIPT ARGS...`` would. Its
exit handler is registered before the script imports accelerate, so it runs after accelerate's
teardown, just before the interpreter finalises. It prints, on a line of its own (the ranks share
one terminal), the gloo worker threads (native, named by gloo) and accelerate's own Python threads
still alive then. A thread alive at that point is what made runs abort at exit
(issue 19): its next request for the GIL, once finalisation began, ends it inside C++ with
``std::terminate``. The exit code only shows that when the race is lost; this report shows the
cause on every run.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import threading


def _native_thread_names() -> list[str] | None:
    tasks = "/proc/self/task"
    if not os.path.isdir(tasks):  # not Linux: nothing to inspect
        return None
    names = []
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/comm", encoding="utf-8") as file:
                names.append(file.read().strip())
        except OSError:  # the thread ended while being listed
            continue
    return names


def _report_threads() -> None:
    names = _native_thread_names()
    # accelerate names its threads "accelerate-..."; other libraries' threads (tqdm's monitor, which
    # ends on its own at exit without being joined) are not this check's business.
    python = [thread.name for thread in threading.enumerate() if thread.name.startswith("accelerate")]
    if names is None:
        alive = ["unknown"]
    else:
        alive = sorted(name for name in names if "gloo" in name) + sorted(python)
    print(f"\nrank {os.environ.get('RANK')}: threads at exit: [{','.join(alive) or 'none'}]", flush=True)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python threads_at_exit.py SCRIPT [ARGS...]")
    atexit.register(_report_threads)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
