"""`accelerate launch` options that reach torch.distributed.run (--tee, --log_dir, --role, --max_restarts)
and the mpirun path, each checked on a real 2-process CPU run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.commands.helpers import SCRIPTS, reserved_port, run_cli

RESTART_ONCE = str(SCRIPTS / "restart_once.py")
TRAIN = str(SCRIPTS / "train_regression.py")


@pytest.fixture(scope="module")
def restarted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One run with every agent option: rank 0 fails on the first attempt, the restart succeeds."""
    home = tmp_path_factory.mktemp("home")
    log_dir = home / "logs"
    with reserved_port() as port:
        result = run_cli("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port),
                         "--tee", "3", "--log_dir", str(log_dir), "--role", "trainer", "--max_restarts", "1",
                         "--monitor_interval", "0.2", "--rdzv_conf", "join_timeout=120",
                         RESTART_ONCE, home=home)  # fmt: skip
    return result, log_dir


def test_max_restarts_restarts_the_group(
    restarted_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = restarted_run
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (0, 1):
        assert f"rank={rank} role=trainer attempt=1 max_restarts=1" in result.stdout
        assert f"rank={rank} done" in result.stdout
    # The static rendezvous cannot restart; the launcher picked c10d and said so.
    assert "rdzv_backend: c10d" in result.stderr
    # Before restarting, the launcher said which rank failed, how, and which restart this is.
    assert "accelerate launch: rank 0 (pid" in result.stderr and "failed with exit code 3" in result.stderr
    assert "restart attempt 1 of 1, --max_restarts 1" in result.stderr


def test_role_names_the_workers(restarted_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, _ = restarted_run
    assert "role=trainer" in result.stdout
    assert "[trainer0]:" in result.stdout  # --tee prefixes each line with the role and local rank


def test_log_dir_holds_each_attempts_logs(
    restarted_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, log_dir = restarted_run
    logs = sorted(p.relative_to(log_dir).parts[1:] for p in log_dir.glob("*/attempt_*/*/stdout.log"))
    assert logs == [(f"attempt_{a}", str(r), "stdout.log") for a in (0, 1) for r in (0, 1)]
    first = next(log_dir.glob("*/attempt_1/1/stdout.log")).read_text()
    assert "rank=1 role=trainer attempt=1" in first and "rank=1 done" in first


def test_one_process_with_agent_options_runs_under_torchrun(tmp_path: Path) -> None:
    result = run_cli("launch", "--cpu", "--num_processes", "1", "--role", "solo", "--tee", "1", "--log_dir",
                     "logs", "--monitor_interval", "0.5", "--rdzv_conf", "join_timeout=9", "--dry_run", RESTART_ONCE,
                     home=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    command = result.stdout.split("Command (torch.distributed.run):", 1)[1]
    for option in (
        "--role solo",
        "--tee 1",
        "--log_dir logs",
        "--monitor_interval 0.5",
        "--rdzv_conf join_timeout=9",
    ):
        assert option in command


def test_static_rendezvous_with_restarts_is_refused(tmp_path: Path) -> None:
    result = run_cli("launch", "--cpu", "--num_processes", "2", "--max_restarts", "1", "--rdzv_backend",
                     "static", "--dry_run", RESTART_ONCE, home=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert "max_restarts=1" in result.stderr and "rdzv_backend=static" in result.stderr


needs_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun (Open MPI/MPICH) not installed"
)


@needs_mpirun
def test_mpirun_runs_two_processes_on_localhost(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n" if _is_open_mpi() else "localhost:2\n")
    out = tmp_path / "params.json"
    with reserved_port() as port:
        result = run_cli("launch", "--cpu", "--num_processes", "2", "--mpirun_hostfile", str(hostfile),
                         "--main_process_port", str(port), TRAIN, str(out), home=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    # WORLD_SIZE is torchrun's; under mpirun the ranks come from the MPI variables.
    assert "world_size=2 rank=0 env_world=None backend=gloo" in result.stdout
    assert "world_size=2 rank=1 env_world=None backend=gloo" in result.stdout
    assert out.is_file()


def _is_open_mpi() -> bool:
    banner = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    return "Open MPI" in banner or "OpenRTE" in banner


@needs_mpirun
def test_mpirun_dry_run_and_refusals(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-a slots=2\nnode-b slots=2\n")
    result = run_cli("launch", "--cpu", "--num_processes", "4", "--num_machines", "2", "--mpirun_hostfile",
                     str(hostfile), "--dry_run", TRAIN, home=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Command (mpirun):" in result.stdout
    assert "node-a" in result.stdout  # the rendezvous address defaults to the hostfile's first host
    assert "MASTER_ADDR=node-a" in result.stdout
    refused = run_cli("launch", "--cpu", "--num_processes", "2", "--mpirun_hostfile", str(hostfile), "--tee",
                      "3", "--dry_run", TRAIN, home=tmp_path)  # fmt: skip
    assert refused.returncode == 2 and "--tee is an option of torch.distributed.run" in refused.stderr
    gpu = run_cli("launch", "--num_processes", "2", "--mpirun_hostfile", str(hostfile), "--dry_run", TRAIN,
                  home=tmp_path)  # fmt: skip
    assert gpu.returncode == 2 and "--mpirun_hostfile launches CPU processes" in gpu.stderr
    missing = run_cli("launch", "--cpu", "--num_processes", "2", "--mpirun_hostfile", str(tmp_path / "nope"),
                      "--dry_run", TRAIN, home=tmp_path)  # fmt: skip
    assert missing.returncode == 2 and "nope (from flag --mpirun_hostfile): no such file" in missing.stderr


def test_mpirun_missing_is_named(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    result = run_cli("launch", "--cpu", "--num_processes", "2", "--mpirun_hostfile", str(hostfile), "--dry_run",
                     TRAIN, home=tmp_path, PATH=str(tmp_path))  # fmt: skip
    assert result.returncode == 2 and "no mpirun is on PATH" in result.stderr
