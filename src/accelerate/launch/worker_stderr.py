"""The workers' stderr, passed through the launcher so that a crash's last words reach the summary.

A worker can end without a Python traceback: gloo aborts the process (SIGABRT) on a collective whose
sizes differ between ranks, and C++ prints why (``terminate called after throwing ...``, ``what():
... Received data size doesn't match expected size``) on stderr just before. The bootstrap's error
file cannot hold that line (Python never runs again), so the launcher must see the worker's stderr.

:class:`StderrCapture` gives each worker, instead of the launcher's own stderr, one end of a channel
whose other end a thread of the launcher reads: every byte is written on to the launcher's stderr at
once and unchanged (progress bars' ``\\r`` included), and the last :data:`TAIL_BYTES` are kept per
rank. The channel is a pseudo-terminal when the launcher's stderr is a terminal (so ``isatty`` stays
true in the worker and colours and progress bars behave as before; its size is copied), else a named
pipe. It plugs into torch's elastic agent as a ``LogsSpecs`` that changes only the stderr of ranks
printing to the console: ``--redirects``/``--tee`` files and filtered ranks are left as they are
(a file's tail is read instead). Without named pipes (Windows) nothing changes.

:func:`last_words` picks the fatal lines out of a tail for :mod:`accelerate.launch.failures`.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from accelerate.launch.bootstrap import LAUNCHER_STDERR_ENV

TAIL_BYTES = 64 * 1024
# Lines a process prints on its way down without a Python traceback: C++'s terminate handler and
# the exception's what(), gloo's enforce failures, the interpreter's fatal errors, CUDA's.
_FATAL = re.compile(
    r"terminate called|what\(\):|enforce fail|Received data size doesn't match|collective mismatch"
    r"|Fatal Python error|CUDA error"
)
_MAX_LINES = 6
_MAX_LINE_CHARS = 600


def last_words(tail: str) -> list[str]:
    """The fatal lines of a worker's stderr tail (the last few), each trimmed to a readable length."""
    found = [line.strip() for line in tail.splitlines() if _FATAL.search(line)]
    return [line[:_MAX_LINE_CHARS] for line in found[-_MAX_LINES:]]


class _Channel:
    """One worker's stderr: the path the worker opens, the end the launcher reads, the tail kept."""

    def __init__(self, path: str, read_fd: int, keep_fd: int, *, fifo: bool) -> None:
        self.path = path
        self.read_fd = read_fd
        self.keep_fd = keep_fd  # our own writer end: the read end sees no EOF (or EIO) before finish()
        self.fifo = fifo
        self.tail = bytearray()


class StderrCapture:
    """Forwards each worker's stderr to ``out_fd`` and keeps its tail (see the module docstring).

    Args:
        directory: where the named pipes are made (the launcher's per-run folder).
        out_fd: where the workers' stderr goes on to: the launcher's own stderr.
    """

    def __init__(self, directory: str, out_fd: int = 2) -> None:
        self.directory = directory
        self.out_fd = out_fd
        self.usable = hasattr(os, "mkfifo")
        self._channels: dict[int, _Channel] = {}  # global rank -> its latest attempt's channel
        self._files: dict[int, str] = {}  # global rank -> a --redirects file its stderr goes to
        self._open: list[_Channel] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._made = 0

    def child_env(self) -> dict[str, str]:
        """For the workers: where this launcher's own stderr can be reopened, for the one message a
        worker prints after the launcher died (the bootstrap's launcher watch), when no channel is left."""
        if not self.usable or not os.path.isdir(f"/proc/{os.getpid()}/fd"):
            return {}
        return {LAUNCHER_STDERR_ENV: f"/proc/{os.getpid()}/fd/{self.out_fd}"}

    def logs_specs(self, inner: Any) -> Any:
        """torch's ``LogsSpecs`` ``inner``, with the console's stderr replaced by a channel per rank."""
        if not self.usable:
            return inner
        from torch.distributed.elastic.multiprocessing.api import LogsSpecs

        capture = self

        class CapturingLogsSpecs(LogsSpecs):
            # Deliberately no super().__init__: every setting is the inner spec's, read through it.
            def __init__(self) -> None:
                pass

            @property
            def root_log_dir(self) -> str:
                return str(inner.root_log_dir)

            def reify(self, envs: dict[int, dict[str, str]]) -> Any:
                dest = inner.reify(envs)
                for local_rank, path in list(dest.stderrs.items()):
                    rank = int(envs.get(local_rank, {}).get("RANK", local_rank))
                    if path == "":  # torch's mark for "the console"
                        dest.stderrs[local_rank] = capture.channel(rank) or ""
                    elif path != os.devnull:
                        capture._files[rank] = path
                return dest

        return CapturingLogsSpecs()

    def channel(self, rank: int) -> str | None:
        """Makes the channel for ``rank`` and returns the path its worker opens; None: leave the console."""
        try:
            made = self._make_pty() if self._terminal() else self._make_fifo(rank)
        except OSError as err:
            print(
                f"accelerate launch: rank {rank}'s stderr goes to the console directly ({err})",
                file=sys.stderr,
            )
            return None
        with self._lock:
            self._channels[rank] = made
            self._open.append(made)
        if self._thread is None:
            self._thread = threading.Thread(target=self._pump, name="accelerate-worker-stderr", daemon=True)
            self._thread.start()
        return made.path

    def _terminal(self) -> bool:
        if not (os.isatty(self.out_fd) and hasattr(os, "openpty")):
            return False
        # A session leader without a controlling terminal would make the pseudo-terminal its own when
        # torch opens it for the worker: use a pipe then.
        return os.getsid(0) != os.getpid() or _has_controlling_terminal()

    def _make_pty(self) -> _Channel:
        import termios
        import tty

        master, replica = os.openpty()
        tty.setraw(replica)  # bytes pass unchanged; the launcher's own terminal translates newlines
        with contextlib.suppress(OSError):
            import fcntl

            size = fcntl.ioctl(self.out_fd, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(replica, termios.TIOCSWINSZ, size)
        os.set_blocking(master, False)
        return _Channel(os.ttyname(replica), master, replica, fifo=False)

    def _make_fifo(self, rank: int) -> _Channel:
        self._made += 1
        path = os.path.join(self.directory, f"stderr_{self._made}_rank_{rank}")
        os.mkfifo(path, 0o600)
        read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # does not wait for a writer
        return _Channel(path, read_fd, os.open(path, os.O_WRONLY), fifo=True)

    def _pump(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                channels = list(self._open)
            try:
                ready, _, _ = select.select([c.read_fd for c in channels], [], [], 0.1)
            except (OSError, ValueError):  # a descriptor closed by finish() meanwhile
                continue
            for chan in channels:
                if chan.read_fd in ready:
                    self._drain(chan)

    def _drain(self, chan: _Channel) -> None:
        while True:
            try:
                data = os.read(chan.read_fd, 65536)
            except (BlockingIOError, OSError):  # nothing more now (or the descriptor is closed)
                return
            if not data:
                return
            self._forward(data)
            chan.tail += data
            if len(chan.tail) > TAIL_BYTES:
                del chan.tail[: len(chan.tail) - TAIL_BYTES]

    def _forward(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.out_fd, view) :]
            except InterruptedError:
                continue
            except OSError:  # the launcher's stderr is gone: keep the tails, drop the echo
                return

    def finish(self) -> dict[int, str]:
        """Reads what the ended workers left, stops the thread, closes the channels; returns the tails.

        Safe to call more than once. Returns global rank -> the last :data:`TAIL_BYTES` of its stderr.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            channels, self._open = self._open, []
        for chan in channels:
            self._drain(chan)
            for fd in (chan.read_fd, chan.keep_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
            if chan.fifo:
                with contextlib.suppress(OSError):
                    os.unlink(chan.path)
        return self.tails()

    def tails(self) -> dict[int, str]:
        found = {rank: chan.tail.decode("utf-8", "replace") for rank, chan in self._channels.items()}
        for rank, path in self._files.items():
            found.setdefault(rank, _file_tail(path))
        return found

    @contextlib.contextmanager
    def running(self) -> Iterator[StderrCapture]:
        """The capture for the block; finished (channels closed) at its end."""
        try:
            yield self
        finally:
            self.finish()


def _has_controlling_terminal() -> bool:
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    except OSError:
        return False
    return True


def _file_tail(path: str) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            file.seek(max(0, file.tell() - TAIL_BYTES))
            return file.read().decode("utf-8", "replace")
    except OSError:
        return ""


def fatal_lines(tails: Mapping[int, str], ranks: list[int]) -> dict[int, list[str]]:
    """rank -> its :func:`last_words`, for the ``ranks`` that printed any."""
    found = {rank: last_words(tails.get(rank, "")) for rank in ranks}
    return {rank: lines for rank, lines in found.items() if lines}
