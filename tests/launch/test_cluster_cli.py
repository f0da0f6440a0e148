"""`accelerate launch` under Slurm and MPI for real: the launcher as a subprocess with fake Slurm
variables for a localhost "allocation" (one node, and two nodes as two launchers on loopback), and
under a real `mpirun` where one is installed."""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelerate.launch.cluster import slurm_port
from tests.commands.helpers import SCRIPTS, accelerate_cmd, cli_env, reserved_port
from tests.helpers.side_by_side import SideBySide, selected_runs

TRAIN = str(SCRIPTS / "train_regression.py")


def slurm_env(job: int, step: int, nodes: int, node: int, **extra: str) -> dict[str, str]:
    """What srun --nodes=NODES --ntasks-per-node=1 sets for the launcher on NODE (all on localhost)."""
    return {
        "SLURM_JOB_ID": str(job), "SLURM_STEP_ID": str(step), "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NNODES": str(nodes), "SLURM_STEP_NUM_NODES": str(nodes), "SLURM_STEP_NUM_TASKS": str(nodes),
        "SLURM_NTASKS": str(nodes), "SLURM_NODEID": str(node), "SLURM_PROCID": str(node), "SLURM_LOCALID": "0",
        "SLURM_STEP_NODELIST": ",".join(["localhost"] * nodes), "SLURM_JOB_NODELIST": "localhost",
        "SLURM_CPUS_PER_TASK": "1", **extra,
    }  # fmt: skip


@contextlib.contextmanager
def slurm_job_on_a_free_port() -> Iterator[tuple[int, int]]:
    """A (job id, step id) whose derived main port is held for the test, as reserved_port does: bound
    with SO_REUSEADDR and never listening, so only torch's store (SO_REUSEADDR too) can take it."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("", port))
            except OSError:
                continue
            job, step = 1000 * rng.randrange(1, 1000) + (port - 20000) // 10, (port - 20000) % 10
            assert slurm_port(job, step) == port
            yield job, step
            return
    pytest.skip("no free port in 20000-29999")


def launch(
    *args: str, home: Path, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(accelerate_cmd("launch", *args), env=cli_env(home, **env), capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_dry_run_shows_where_each_value_came_from(tmp_path: Path) -> None:
    env = slurm_env(4242, 3, nodes=2, node=1)
    result = launch("--cpu", "--dry_run", TRAIN, home=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    for line in ("slurm: SLURM_STEP_NUM_NODES", "slurm: SLURM_NODEID", "slurm: first host of SLURM_STEP_NODELIST",
                 "slurm: 1 CPU process per machine x 2 machines", "Slurm job 4242, step 3: this is node 1 of 2"):  # fmt: skip
        assert line in result.stdout, result.stdout
    assert "--node_rank 1 --master_addr localhost --master_port 22423" in result.stdout
    refused = launch("--cpu", "--num_machines", "4", "--dry_run", TRAIN, home=tmp_path, env=env)
    assert refused.returncode == 2
    assert "num_machines=4 (from flag --num_machines)" in refused.stderr
    assert "num_machines=2 (from slurm: SLURM_STEP_NUM_NODES)" in refused.stderr


def _one_node(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
    cmd = accelerate_cmd("launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port), TRAIN,
                         str(folder / "params.json"))  # fmt: skip
    return cmd, cli_env(folder, **slurm_env(7, 0, nodes=1, node=0))


def _mpirun_two_machines(folder: Path, port: int) -> tuple[list[str], dict[str, str]]:
    # Each rank forgets that its peer shares this machine, as on two machines with one rank each.
    forget = ("unset OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALNRANKS MPI_LOCALRANKID; "
              'exec "$@"')  # fmt: skip
    launcher = accelerate_cmd("launch", "--cpu", "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
                              TRAIN, str(folder / "params.json"))  # fmt: skip
    return mpirun_cmd(2, "sh", "-c", forget, "sh", *launcher, home=folder)


# The real 2-process launches that run one command each start ahead of their tests, side by side
# (tests/helpers/side_by_side.py); the two-launcher loopback test runs while they do.
_CASES_OF_TEST = {
    "test_one_node_allocation_runs_for_real": ["one_node"],
    "test_mpirun_starts_one_launcher_per_simulated_machine": ["mpirun"] if shutil.which("mpirun") else [],
}


@pytest.fixture(scope="module")
def launches(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SideBySide]:
    commands = {"one_node": _one_node, "mpirun": _mpirun_two_machines}
    with selected_runs(
        request, tmp_path_factory.mktemp("launches"), commands, _CASES_OF_TEST,
        at_once=2, timeout=240, reserve_port=reserved_port,
    ) as runs:  # fmt: skip
        yield runs


def test_one_node_allocation_runs_for_real(launches: SideBySide) -> None:
    out = launches.folder("one_node") / "params.json"
    result = launches.result("one_node")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Slurm job 7, step 0: this is node 0 of 1" in result.stderr
    assert "world_size=2 rank=0 env_world=2" in result.stdout and "world_size=2 rank=1" in result.stdout
    assert out.is_file()


def test_two_nodes_on_loopback_meet_through_the_derived_endpoint(tmp_path: Path) -> None:
    """Two launchers, as srun would start them on two nodes; nothing but the Slurm variables differs."""
    with slurm_job_on_a_free_port() as (job, step):
        launchers = [
            subprocess.Popen(
                accelerate_cmd("launch", "--cpu", TRAIN, str(tmp_path / f"node{node}.json")),
                env=cli_env(tmp_path, **slurm_env(job, step, nodes=2, node=node)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for node in (0, 1)
        ]
        try:
            outputs = [launcher.communicate(timeout=240) for launcher in launchers]
        finally:
            for launcher in launchers:
                launcher.kill()
                launcher.wait()
    for node, (launcher, (stdout, stderr)) in enumerate(zip(launchers, outputs)):
        assert launcher.returncode == 0, stdout + stderr
        assert f"this is node {node} of 2" in stderr
        assert f"world_size=2 rank={node} env_world=2 backend=gloo" in stdout
    assert (tmp_path / "node0.json").is_file()  # rank 0 writes; it runs on node 0


# --- a real mpirun ---------------------------------------------------------------------------------------
needs_mpirun = pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun (Open MPI/MPICH) not installed"
)


def mpirun_cmd(ranks: int, *command: str, home: Path) -> tuple[list[str], dict[str, str]]:
    """The mpirun command line starting COMMAND on RANKS ranks, and its environment."""
    from accelerate.launch.mpirun import OPEN_MPI, mpi_flavour, mpirun_environ

    found = str(shutil.which("mpirun"))
    flavour = mpi_flavour(found)
    if flavour == OPEN_MPI:  # a 1-core machine has one slot; the launchers mostly wait
        cmd = [found, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"]
    else:
        cmd = [found, "-n", str(ranks)]
    return [*cmd, *command], cli_env(home, **mpirun_environ(flavour))


def mpirun(ranks: int, *command: str, home: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    cmd, env = mpirun_cmd(ranks, *command, home=home)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@needs_mpirun
def test_mpirun_rank_variables_reach_the_plan(tmp_path: Path) -> None:
    one = mpirun(1, *accelerate_cmd("launch", "--cpu", "--dry_run", TRAIN), home=tmp_path)
    assert one.returncode == 0, one.stdout + one.stderr
    assert "this launcher is rank 0 of 1" in one.stdout and "mpi: " in one.stdout
    # Two ranks on one machine would each start that machine's processes: refused, on both ranks.
    two = mpirun(2, *accelerate_cmd("launch", "--cpu", "--dry_run", TRAIN), home=tmp_path)
    assert two.returncode != 0
    assert "MPI started several launchers on this machine" in two.stdout + two.stderr


@needs_mpirun
def test_mpirun_starts_one_launcher_per_simulated_machine(launches: SideBySide) -> None:
    # Each rank forgets that its peer shares this machine (see _mpirun_two_machines).
    result = launches.result("mpirun")
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (0, 1):
        assert f"world_size=2 rank={rank} env_world=2 backend=gloo" in result.stdout
    assert "this launcher is rank 1 of 2" in result.stderr
