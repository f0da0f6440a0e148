"""A project folder belongs to one job from its first save or load until it exits (issue 36).

Every job here is a real, independent ``python`` process; they synchronise through files in an
``events`` folder, never through fixed sleeps.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

# One training job, as a new user writes it: train a step, save_state(), twelve times. ``first`` is
# "save" or "load" (load_state(missing_ok=True) at the top: the autoresume pattern). After its first
# save it writes ``events/NAME-saved-once`` and, given ``wait_for``, waits until that file exists
# (so it is alive while the other job tries). It reports in ``events/NAME.json``.
_JOB = """
import json, os, sys, time, torch
from pathlib import Path
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
project, events, name, first, wait_for = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=3)
accelerator = Accelerator(cpu=True, project_config=config)
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
report = {"pid": os.getpid(), "saved": [], "error": None, "resumed": None}
try:
    if first == "load":
        loaded = accelerator.load_state(missing_ok=True)
        report["resumed"] = None if loaded is None else Path(loaded).name
    for step in range(12):
        accelerator.backward(model(torch.randn(4, 2)).sum())
        optimizer.step()
        optimizer.zero_grad()
        report["saved"].append(Path(accelerator.save_state()).name)
        if step == 0:
            (events / f"{name}-saved-once").write_text("")
            deadline = time.monotonic() + 120
            while wait_for != "-" and not (events / wait_for).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
except Exception as exc:
    report["error"] = f"{type(exc).__name__}: {exc}"
(events / f"{name}.json").write_text(json.dumps(report))
"""


def _start(
    project: Path, events: Path, name: str, *, first: str = "save", wait_for: str = "-"
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-c", _JOB, str(project), str(events), name, first, wait_for]
    return subprocess.Popen(args, stderr=subprocess.PIPE)


def _wait_for(path: Path, job: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if job.poll() is not None and not path.exists():
            raise AssertionError(
                f"{job.args[3:6]} ended ({job.returncode}) before {path.name}: {job.stderr.read()!r}"
            )  # type: ignore[union-attr,index]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _report(events: Path, name: str, job: subprocess.Popen[bytes]) -> dict[str, Any]:
    _, stderr = job.communicate(timeout=120)
    assert job.returncode == 0, stderr.decode(errors="replace")
    report: dict[str, Any] = json.loads((events / f"{name}.json").read_text())
    report["stderr"] = stderr.decode(errors="replace")
    return report


def _run_ids(project: Path) -> dict[str, str]:
    root = project / "checkpoints"
    return {
        p.name: json.loads((p / "accelerate_manifest.json").read_text())["extra"].get("run_id")
        for p in sorted(root.iterdir())
        if p.name.startswith("checkpoint_")
    }


@pytest.mark.parametrize("first", ["save", "load"])
def test_a_second_job_is_refused_at_its_first_save_or_load_while_the_first_runs(
    tmp_path: Path, first: str
) -> None:
    project, events = tmp_path / "project", tmp_path / "events"
    events.mkdir()
    job_a = _start(project, events, "a", wait_for="b.json")
    try:
        _wait_for(events / "a-saved-once", job_a)  # job A owns the folder now, between two saves
        job_b = _start(project, events, "b", first=first)
        b = _report(events, "b", job_b)
        a = _report(events, "a", job_a)
    finally:
        for job in (job_a,):
            if job.poll() is None:
                job.kill()
    assert b["saved"] == [] and b["resumed"] is None
    assert b["error"] is not None and b["error"].startswith("ProjectBusyError"), b["error"]
    assert f"pid {a['pid']}" in b["error"] and f"host {socket.gethostname()}" in b["error"]
    assert "since" in b["error"] and "project_dir" in b["error"]
    # The first job never noticed: all twelve saves, and the folder holds only its checkpoints.
    assert a["error"] is None and a["saved"] == [f"checkpoint_{i}" for i in range(12)]
    ids = _run_ids(project)
    assert sorted(ids) == ["checkpoint_10", "checkpoint_11", "checkpoint_9"]
    assert len(set(ids.values())) == 1 and None not in ids.values()


# A job that owned the folder, forked a child (as a DataLoader worker is) and was killed: the child
# lives on, yet the lock was the dead process's alone.
_KILLED_WITH_A_CHILD = """
import os, signal, sys, time, torch
from pathlib import Path
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
project, events = sys.argv[1], Path(sys.argv[2])
config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=3)
accelerator = Accelerator(cpu=True, project_config=config)
model = torch.nn.Linear(2, 2)
accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
accelerator.save_state()
child = os.fork()
if child == 0:
    deadline = time.monotonic() + 120
    while not (events / "child-may-go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    os._exit(0)
(events / "child").write_text(str(child))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_restart_takes_the_folder_over_from_a_killed_job_whose_forked_child_lives_on(
    tmp_path: Path,
) -> None:
    project, events = tmp_path / "project", tmp_path / "events"
    events.mkdir()
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_WITH_A_CHILD, str(project), str(events)], timeout=120
    )
    assert killed.returncode == -9
    child = int((events / "child").read_text())
    try:
        os.kill(child, 0)  # still running, holding the dead job's descriptor of the lock file
        restart = _start(project, events, "restart", first="load")  # the autoresume pattern
        report = _report(events, "restart", restart)
    finally:
        (events / "child-may-go").write_text("")
    assert report["error"] is None and report["resumed"] == "checkpoint_0"
    assert report["saved"] == [f"checkpoint_{i}" for i in range(1, 13)]
    # A plain restart is a new run: the resume says whose checkpoint it took, naming both runs.
    ids = _run_ids(project)
    assert len(set(ids.values())) == 1
    assert "resuming from" in report["stderr"] and "written by run " in report["stderr"]
    assert f"this is run {next(iter(ids.values()))}" in report["stderr"]


def test_resuming_this_runs_own_checkpoint_says_nothing_and_another_runs_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from accelerate import Accelerator
    from accelerate.checkpointing.run_identity import run_id
    from accelerate.utils import ProjectConfiguration

    project, events = tmp_path / "project", tmp_path / "events"
    events.mkdir()
    other = _report(events, "other", _start(project, events, "other"))  # a job before this one, ended
    config = ProjectConfiguration(project_dir=str(project), automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    with caplog.at_level("WARNING", logger="accelerate.checkpointing"):
        accelerator.load_state()
    theirs = _run_ids(project)["checkpoint_11"]
    assert theirs != run_id() and f"-{other['pid']}-" in theirs
    assert [r.getMessage() for r in caplog.records if "written by run" in r.getMessage()] == [
        f"load_state: resuming from {project / 'checkpoints' / 'checkpoint_11'}, written by run {theirs}; "
        f"this is run {run_id()}. That is expected when a job is started again after it ended (a plain "
        "restart of the script is a new run). If that run was another job sharing this project_dir, these are "
        "its weights: load the checkpoint you mean by name (load_state('.../checkpoint_N')) and give each "
        "job its own ProjectConfiguration(project_dir=...)."
    ]
    caplog.clear()
    accelerator.save_state()
    with caplog.at_level("WARNING", logger="accelerate.checkpointing"):
        accelerator.load_state()  # this run's own checkpoint_12
        accelerator.load_state(str(project / "checkpoints" / "checkpoint_11"))  # named: the caller's choice
    assert not [r for r in caplog.records if "written by" in r.getMessage()]


def test_a_process_of_the_same_run_is_not_another_job(tmp_path: Path) -> None:
    from accelerate.storage.project_lock import ProjectBusyError, own_project

    root = tmp_path / "project"
    script = (
        "import sys\n"
        "from accelerate.storage.project_lock import own_project\n"
        "own_project(sys.argv[1], run_id='run-1')\n"
        "print('owned', flush=True)\n"
        "sys.stdin.read()\n"  # holds the folder until the test closes its stdin
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "owned"
        own_project(root, run_id="run-1")  # each node's writer of one job, on one shared folder
        with pytest.raises(ProjectBusyError, match=r"run run-1 \(lock file"):
            own_project(root, run_id="run-2")
    finally:
        holder.communicate("", timeout=120)


def test_the_run_id_of_a_launched_worker_is_its_agents_so_restarts_keep_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from accelerate.checkpointing import run_identity

    monkeypatch.setattr(run_identity, "_run_id", None)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    plain = run_identity.run_id()
    assert plain.startswith(f"{socket.gethostname()}-{os.getpid()}-") and plain == run_identity.run_id()
    monkeypatch.setattr(run_identity, "_run_id", None)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # what every static launch gets: not an id
    assert run_identity.run_id().startswith(f"{socket.gethostname()}-{os.getppid()}-")


def saved_run_ids(project: str) -> tuple[str, str]:
    from accelerate import Accelerator
    from accelerate.checkpointing.run_identity import run_id
    from accelerate.utils import ProjectConfiguration

    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config)
    accelerator.prepare(torch.nn.Linear(2, 2))
    path = accelerator.save_state()
    accelerator.load_state()
    return run_id(), json.loads((Path(path) / "accelerate_manifest.json").read_text())["extra"]["run_id"]


def test_the_ranks_of_one_job_share_process_0s_run_id(tmp_path: Path, pool2: Any) -> None:
    results = pool2.run(saved_run_ids, str(tmp_path / "project"))
    assert results[0] == results[1] and results[0][0] == results[0][1]


def test_a_folder_that_cannot_hold_the_lock_file_is_not_owned_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from accelerate.storage.project_lock import own_project

    (tmp_path / "a file").write_text("")
    with caplog.at_level("WARNING", logger="accelerate.checkpointing"):
        own_project(tmp_path / "a file" / "project", run_id="run-1")  # read-only storage fails alike
        own_project(tmp_path / "a file" / "project", run_id="run-1")
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        f"Cannot create {tmp_path / 'a file' / 'project' / '.accelerate-owner.lock'}"
    ]
