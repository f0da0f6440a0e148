"""A 128-node Slurm step through the cluster derivation: each node's launcher, as that node sees it.

The node list is compressed the ways Slurm writes it (several prefixes, zero-padded ranges, a range
list in one bracket), and the nodes hold 8 or 4 GPUs. Every launcher must agree on the machine
count, the main address and port, take its own node rank, and start one process per GPU of its own
node. torchrun's agent then numbers the processes across nodes from each node's own count (it
gathers every agent's local world size), so the job has as many ranks as GPUs; that last step is
torch's and is only recomputed here.
"""

from __future__ import annotations

from accelerate.launch.commands import torchrun_args
from accelerate.launch.hostlist import slurm_hosts
from tests.launch.test_cluster import slurm
from tests.launch.test_plan import plan

NODELIST = "gpu[001-064],hpc-a[7-9,12],hpc-b[0100-0159]"


def gpus_on(node: int) -> int:
    return 8 if node < 64 or node % 3 == 0 else 4  # 64 full nodes, then a mix of 8 and 4


def launcher_args(node: int) -> list[str]:
    env = slurm(
        SLURM_JOB_ID="7654321", SLURM_STEP_ID="0", SLURM_STEP_NUM_NODES="128", SLURM_NNODES="128",
        SLURM_JOB_NUM_NODES="128", SLURM_STEP_NUM_TASKS="128", SLURM_NTASKS="128", SLURM_NODEID=str(node),
        SLURM_PROCID=str(node), SLURM_STEP_NODELIST=NODELIST, SLURM_JOB_NODELIST=NODELIST,
        SLURM_GPUS_ON_NODE=str(gpus_on(node)), SLURM_CPUS_PER_TASK="64",
    )  # fmt: skip
    p = plan(env=env, gpus=gpus_on(node))
    assert p.value("num_cpu_threads_per_process") == 64 // gpus_on(node)
    return torchrun_args(p.settings, "train.py", [], module=False, no_python=False)


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_128_nodes_with_uneven_gpus_agree_on_the_job_and_start_one_process_per_gpu() -> None:
    hosts = slurm_hosts(NODELIST)
    assert len(hosts) == 128 and hosts[:2] == ["gpu001", "gpu002"]
    assert hosts[64:69] == ["hpc-a7", "hpc-a8", "hpc-a9", "hpc-a12", "hpc-b0100"] and hosts[-1] == "hpc-b0159"
    every = [launcher_args(node) for node in range(128)]
    for name in ("--nnodes", "--master_addr", "--master_port", "--rdzv_backend"):
        assert {flag(args, name) for args in every} == {flag(every[0], name)}, name
    assert (flag(every[0], "--nnodes"), flag(every[0], "--master_addr")) == ("128", "gpu001")
    assert flag(every[0], "--master_port") == str(20000 + 321 * 10 + 0)
    assert [int(flag(args, "--node_rank")) for args in every] == list(range(128))
    local = [int(flag(args, "--nproc_per_node")) for args in every]
    assert local == [gpus_on(node) for node in range(128)]
    # torchrun's numbering: a node's first rank is the sum of the processes of the nodes before it.
    ranks = [sum(local[:node]) + i for node in range(128) for i in range(local[node])]
    assert ranks == list(range(sum(local))) and sum(local) == 64 * 8 + 21 * 8 + 43 * 4
