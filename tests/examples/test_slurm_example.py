"""examples/slurm/train_classifier.sbatch, run as sbatch would run it on a 2-node job, with a stand-in
`srun` that starts its command once per "node" here (no Slurm needed): every launcher must find its
place in the job from the Slurm variables alone."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

from tests.commands.helpers import REPO, cli_env

TEMPLATE = REPO / "examples" / "slurm" / "train_classifier.sbatch"

# srun's own options are skipped; the command then runs once per node of the job, as srun would run
# it on each node with that node's step variables.
FAKE_SRUN = """#!/bin/sh
while [ "${1#-}" != "$1" ]; do shift; done
node=0
while [ "$node" -lt "$SLURM_JOB_NUM_NODES" ]; do
  SLURM_STEP_ID=0 SLURM_STEP_NUM_NODES=$SLURM_JOB_NUM_NODES SLURM_STEP_NUM_TASKS=$SLURM_JOB_NUM_NODES \\
  SLURM_NODEID=$node SLURM_PROCID=$node SLURM_STEP_NODELIST=$SLURM_JOB_NODELIST "$@" || exit $?
  node=$((node + 1))
done
"""


def executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_sbatch_template_gives_each_node_its_place(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir / "srun", FAKE_SRUN)
    executable(
        bin_dir / "accelerate",
        f'#!/bin/sh\nexec "{sys.executable}" -m accelerate.commands.accelerate_cli "$@"\n',
    )
    env = cli_env(tmp_path, SLURM_JOB_ID="55", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="node[1-2]",
                  SLURM_CPUS_PER_TASK="4", LAUNCH_FLAGS="--cpu --dry_run")  # fmt: skip
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    del env["OMP_NUM_THREADS"]  # else it wins over the share of SLURM_CPUS_PER_TASK
    result = subprocess.run(["bash", str(TEMPLATE), "--epochs", "1"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    reports = result.stdout.split("accelerate launch --dry_run: nothing was started.")[1:]
    assert len(reports) == 2, result.stdout
    for node, report in enumerate(reports):
        assert (
            f"--nnodes 2 --nproc_per_node 1 --node_rank {node} --master_addr node1 --master_port 20550"
            in report
        )
        assert "examples/train_classifier.py --epochs 1" in report
        assert "slurm: SLURM_CPUS_PER_TASK=4 // 1 process per machine" in report
