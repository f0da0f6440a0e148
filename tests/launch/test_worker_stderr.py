"""Contract: the workers' stderr reaches the user unchanged, and a crash's last words reach the summary.

The channels are tested directly (named pipe and pseudo-terminal), then a real `accelerate launch`
of a gather whose sizes differ between the ranks: gloo aborts one rank (SIGABRT, no traceback), and
the failure summary must quote gloo's line with the rank that printed it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from accelerate.launch.worker_stderr import StderrCapture, last_words
from tests.commands.helpers import accelerate_cmd, cli_env, reserved_port

GLOO_LINE = (
    "  what():  [enforce fail at /x/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 30 vs 24. "
    "Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?"
)


def _write_as_a_worker(path: str, data: bytes) -> bool:
    """Opens the channel as torch's agent does for a worker, writes, closes; whether it was a terminal."""
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        return os.isatty(file.fileno())


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            return out
        if not chunk:
            return out
        out += chunk


def test_through_a_pipe_every_byte_is_forwarded_and_the_tail_is_kept(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    capture = StderrCapture(str(tmp_path), out_fd=write_end)
    path = capture.channel(rank=3)
    assert path is not None
    data = (
        b"progress 10%\rprogress 100%\nterminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
    )
    assert _write_as_a_worker(path, data + GLOO_LINE.encode() + b"\n") is False
    tails = capture.finish()
    os.close(write_end)
    assert _read_all(read_end) == data + GLOO_LINE.encode() + b"\n"
    assert tails[3].endswith(GLOO_LINE + "\n")
    assert not os.path.exists(path)  # the named pipe is removed


def test_through_a_terminal_the_worker_sees_a_terminal_of_the_same_size(tmp_path: Path) -> None:
    import fcntl
    import struct
    import termios

    master, replica = os.openpty()  # plays the user's terminal
    fcntl.ioctl(replica, termios.TIOCSWINSZ, struct.pack("HHHH", 45, 123, 0, 0))
    capture = StderrCapture(str(tmp_path), out_fd=replica)
    path = capture.channel(rank=0)
    assert path is not None and path.startswith("/dev/")
    # O_NOCTTY: this test process must not take the terminal as its own (torch's agent runs in a
    # process that already has one, which StderrCapture checks).
    with open(os.open(path, os.O_WRONLY | os.O_NOCTTY), "wb") as file:
        assert os.isatty(file.fileno())
        assert os.get_terminal_size(file.fileno()) == os.terminal_size((123, 45))
        file.write(b"a\rb\n")
    capture.finish()
    # Unchanged bytes reach the user's terminal, whose own settings then turn "\n" into "\r\n".
    assert _read_all(master) == b"a\rb\r\n"
    os.close(master)
    os.close(replica)


def test_the_logs_spec_replaces_only_the_console_and_reads_redirect_files(tmp_path: Path) -> None:
    redirected = tmp_path / "stderr.log"
    redirected.write_text("Fatal Python error: Segmentation fault\n")
    inner = SimpleNamespace(
        root_log_dir=str(tmp_path),
        reify=lambda envs: SimpleNamespace(stderrs={0: "", 1: str(redirected), 2: os.devnull}),
    )
    read_end, write_end = os.pipe()
    capture = StderrCapture(str(tmp_path), out_fd=write_end)
    specs = capture.logs_specs(inner)
    assert specs.root_log_dir == str(tmp_path)
    dest = specs.reify({i: {"RANK": str(10 + i)} for i in range(3)})
    assert dest.stderrs[0].startswith(str(tmp_path))  # the console's stderr becomes a channel
    assert dest.stderrs[1] == str(redirected) and dest.stderrs[2] == os.devnull
    tails = capture.finish()
    os.close(write_end)
    os.close(read_end)
    assert last_words(tails[11]) == ["Fatal Python error: Segmentation fault"]
    assert set(tails) == {10, 11}


def test_last_words_are_the_fatal_lines_only() -> None:
    tail = (
        "step 1\nterminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        + GLOO_LINE
        + "\nbye\n"
    )
    assert last_words(tail) == [
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        GLOO_LINE.strip(),
    ]
    assert last_words("loss 0.3\nepoch 2\n") == []


SCRIPT = Path(__file__).resolve().parent / "scripts" / "gather_mismatch.py"


@pytest.mark.timeout(120)
def test_a_mismatched_gather_without_debug_ends_with_gloos_line_in_the_summary(tmp_path: Path) -> None:
    with reserved_port() as port:
        result = subprocess.run(
            accelerate_cmd("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port), str(SCRIPT)),
            env=cli_env(tmp_path), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode != 0, result.stderr[-4000:]
    rule = "=" * 78
    assert rule in result.stderr, result.stderr[-4000:]
    summary = result.stderr[result.stderr.index(rule) :]
    match = re.search(r"rank (\d) wrote on stderr before it ended:\n(.*?)\n=", summary, re.S)
    assert match, summary
    assert "Received data size doesn't match expected size" in match.group(2)
    # The rank that printed it is the rank the summary names as the one that crashed (SIGABRT).
    assert f"rank {match.group(1)} (pid" in summary and "signal SIGABRT" in summary
    # The user still sees the worker's own output, as before.
    assert result.stderr.index("Received data size") < result.stderr.index(rule)


def test_workers_are_told_where_the_launchers_own_stderr_reopens(tmp_path: Path) -> None:
    # For the bootstrap's "the launcher is gone" line, once no channel is read any more.
    read_end, write_end = os.pipe()
    env = StderrCapture(str(tmp_path), out_fd=write_end).child_env()
    assert env == {"ACCELERATE_LAUNCHER_STDERR": f"/proc/{os.getpid()}/fd/{write_end}"}
    fd = os.open(env["ACCELERATE_LAUNCHER_STDERR"], os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"bye\n")
    os.close(fd)
    os.close(write_end)
    assert _read_all(read_end) == b"bye\n"
