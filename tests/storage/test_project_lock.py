"""Two jobs sharing one project folder: the second gets one clear error, never a cascade (issues 29, 36)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate import Accelerator
from accelerate.checkpointing.project import checkpoints_root
from accelerate.storage.project_lock import LOCK_NAME, ProjectBusyError, own_project, release_projects
from accelerate.utils import ProjectConfiguration
from tests.helpers.pool import WorkerPool

# Job A: saves with a pre-hook that announces itself (the save is under way) and then holds the save
# until the test has seen the second job refused (the RELEASE file), however slow the machine is.
_JOB_A = """
import sys, time, torch
from pathlib import Path
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
project, marker, release = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
accelerator = Accelerator(cpu=True, project_config=ProjectConfiguration(project_dir=project,
                          automatic_checkpoint_naming=True))
accelerator.prepare(torch.nn.Linear(2, 2))
def slow(models, weights, folder):
    marker.write_text(folder)
    deadline = time.monotonic() + 120  # only ends a test that never releases it
    while not release.exists():
        if time.monotonic() > deadline:
            raise SystemExit("job A: never released")
        time.sleep(0.02)
accelerator.register_save_state_pre_hook(slow)
accelerator.save_state()
"""


def _accelerator(project: Path) -> Accelerator:
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    return accelerator


def _wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_second_job_gets_one_error_naming_the_first_then_saves_after_it(tmp_path: Path) -> None:
    project, marker, release = tmp_path / "project", tmp_path / "saving", tmp_path / "release"
    job_a = subprocess.Popen([sys.executable, "-c", _JOB_A, str(project), str(marker), str(release)])
    try:
        _wait_for(marker)
        accelerator = _accelerator(project)
        with pytest.raises(ProjectBusyError) as caught:
            accelerator.save_state()
        release.touch()  # job A's save, under way all along, may finish now
        message = str(caught.value)
        assert f"pid {job_a.pid}" in message and f"host {socket.gethostname()}" in message
        assert "owner since" in message and "project_dir" in message
        assert job_a.wait(timeout=120) == 0
        accelerator.load_state()  # resume past the first job's checkpoint_0 (saving onto it is refused)
        saved = accelerator.save_state()  # the first job is done: the lock is free
        assert Path(saved).name == "checkpoint_1"
        assert (project / "checkpoints" / "checkpoint_0").is_dir()
    finally:
        if job_a.poll() is None:
            job_a.kill()


def test_the_lock_of_a_killed_job_does_not_block_the_next(tmp_path: Path) -> None:
    project = tmp_path / "project"
    script = (
        "import os, signal, sys\n"
        "from accelerate.storage.project_lock import own_project\n"
        "own_project(sys.argv[1], run_id='killed')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(project)], timeout=120)
    assert done.returncode == -9
    assert (project / LOCK_NAME).is_file()  # left behind, yet free
    assert Path(_accelerator(project).save_state()).name == "checkpoint_0"


_TRY_TO_OWN = (
    "import sys\n"
    "from accelerate.storage.project_lock import ProjectBusyError, own_project\n"
    "try:\n"
    "    own_project(sys.argv[1], run_id='another job')\n"
    "except ProjectBusyError as exc:\n"
    "    print('busy:', exc)\n"
    "else:\n"
    "    print('owned')\n"
)


def _another_job_tries(project: Path) -> str:
    args = [sys.executable, "-c", _TRY_TO_OWN, str(project)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout


def test_the_folder_stays_owned_after_an_async_save_until_end_training(tmp_path: Path) -> None:
    project = tmp_path / "project"
    accelerator = _accelerator(project)
    accelerator.save_state(async_save=True)
    from accelerate.checkpointing.accelerator_io import wait_for_async_save

    wait_for_async_save()
    assert _another_job_tries(project).startswith(f"busy: Another job owns {project}: host ")
    accelerator.end_training()  # the job is over (as its process's exit would say)
    assert _another_job_tries(project).strip() == "owned"


def save_while_locked_elsewhere(project: str) -> str:
    accelerator = _accelerator(Path(project))
    try:
        accelerator.save_state()
    except ProjectBusyError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "saved"


def test_every_rank_raises_when_the_writer_finds_the_project_busy(tmp_path: Path, pool2: WorkerPool) -> None:
    project = tmp_path / "project"
    own_project(project, run_id="another job")  # this test process is another job
    results: list[Any] = pool2.run(save_while_locked_elsewhere, str(project))
    release_projects()
    for result in results:
        assert result.startswith("ProjectBusyError: save_state into") and f"pid {os.getpid()}" in result
    assert not checkpoints_root(project).exists()  # refused before anything was written
