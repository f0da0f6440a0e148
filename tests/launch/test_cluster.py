"""Slurm and MPI allocations as launch settings: the port rule, translation with the variables set (no
scheduler needed), provenance, and the errors for allocations that disagree with what was given."""

from __future__ import annotations

import dataclasses
import shutil
from typing import Any

import pytest

from accelerate.config.config_file import LaunchConfig
from accelerate.launch import cluster
from accelerate.launch.checks import LaunchError
from accelerate.launch.cluster import slurm_port
from accelerate.launch.plan import LaunchPlan
from tests.launch.test_plan import CONFIG_PATH, plan

# srun --nodes=2 --ntasks-per-node=1 inside job 123456 (its second step), as node 1 sees it.
SLURM_NODE1 = {
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_ID": "1",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_NTASKS": "2",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_STEP_NODELIST": "gpu[07-08]",
    "SLURM_GPUS_ON_NODE": "4",
    "SLURM_CPUS_PER_TASK": "32",
}


def slurm(**changes: str | None) -> dict[str, str]:
    """SLURM_NODE1 with some variables changed (a value) or unset (``None``)."""
    env = dict(SLURM_NODE1)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def sources(p: LaunchPlan, *names: str) -> dict[str, tuple[Any, str]]:
    return {name: (p.value(name), p.settings[name].source) for name in names}


def test_the_slurm_port_rule() -> None:
    assert slurm_port(123456, 1) == 24561  # the README's example
    assert slurm_port(123456, 0) != slurm_port(123457, 0) != slurm_port(123456, 1)
    assert all(20000 <= slurm_port(job, step) <= 29999 for job in (0, 999, 10**9) for step in (0, 9, 12))


# --- Slurm: one launcher per node ----------------------------------------------------------------
def test_a_slurm_step_gives_machines_rank_address_port_processes_and_threads() -> None:
    p = plan(env=slurm(), gpus=4)
    assert sources(p, "num_machines", "machine_rank", "main_process_ip", "main_process_port") == {
        "num_machines": (2, "slurm: SLURM_STEP_NUM_NODES"),
        "machine_rank": (1, "slurm: SLURM_NODEID"),
        "main_process_ip": ("gpu07", "slurm: first host of SLURM_STEP_NODELIST"),
        "main_process_port": (24561, "slurm: 20000 + SLURM_JOB_ID % 1000 x 10 + SLURM_STEP_ID % 10"),
    }
    assert sources(p, "num_processes", "num_cpu_threads_per_process") == {
        "num_processes": (8, "slurm: SLURM_GPUS_ON_NODE=4 per machine x 2 machines"),
        "num_cpu_threads_per_process": (8, "slurm: SLURM_CPUS_PER_TASK=32 // 4 processes per machine"),
    }
    assert p.mode == "torchrun" and p.child_env["OMP_NUM_THREADS"] == "8"
    command = " ".join(p.torchrun_args)
    for part in (
        "--nnodes 2",
        "--nproc_per_node 4",
        "--node_rank 1",
        "--master_addr gpu07",
        "--master_port 24561",
    ):
        assert part in command
    report = p.describe()
    assert "slurm: SLURM_NODEID" in report and "Slurm job 123456, step 1: this is node 1 of 2" in report


def test_a_step_id_that_is_not_a_number_counts_as_step_0() -> None:
    assert plan(env=slurm(SLURM_STEP_ID="interactive"), gpus=4).value("main_process_port") == 24560


def test_every_node_of_the_step_agrees_on_the_endpoint() -> None:
    node0 = plan(env=slurm(SLURM_NODEID="0", SLURM_PROCID="0"), gpus=4)
    node1 = plan(env=slurm(), gpus=4)
    endpoint = ("main_process_ip", "main_process_port", "num_machines", "num_processes")
    assert [node0.value(n) for n in endpoint] == [node1.value(n) for n in endpoint]
    assert (node0.value("machine_rank"), node1.value("machine_rank")) == (0, 1)


def test_older_variables_and_job_lists_are_read_when_the_step_ones_are_missing() -> None:
    env = slurm(SLURM_STEP_NUM_NODES=None, SLURM_STEP_NODELIST=None, SLURM_STEP_NUM_TASKS=None,
                SLURM_JOB_NODELIST="cpu[3-4],gpu1", SLURM_GPUS_ON_NODE=None, SLURM_CPUS_PER_TASK=None,
                SLURM_CPUS_ON_NODE="16(x2)")  # fmt: skip
    p = plan({"cpu": True}, env=env)
    assert sources(p, "num_machines", "main_process_ip", "num_processes", "num_cpu_threads_per_process") == {
        "num_machines": (2, "slurm: SLURM_NNODES"),
        "main_process_ip": ("cpu3", "slurm: first host of SLURM_JOB_NODELIST"),
        "num_processes": (2, "slurm: 1 CPU process per machine x 2 machines"),
        "num_cpu_threads_per_process": (16, "slurm: SLURM_CPUS_ON_NODE=16 // 1 process per machine"),
    }


def test_given_values_that_agree_keep_their_source_and_master_vars_win_over_the_node_list() -> None:
    p = plan({"num_machines": 2, "num_processes": 4, "main_process_port": 31000},
             env=slurm(MASTER_ADDR="10.0.0.7"), gpus=4)  # fmt: skip
    assert sources(p, "num_machines", "num_processes", "main_process_ip", "main_process_port") == {
        "num_machines": (2, "flag --num_machines"),
        "num_processes": (4, "flag --num_processes"),
        "main_process_ip": ("10.0.0.7", "environment MASTER_ADDR"),
        "main_process_port": (31000, "flag --main_process_port"),
    }
    assert plan(env=slurm(MASTER_PORT="31001"), gpus=4).settings["main_process_port"].source == (
        "environment MASTER_PORT"
    )
    assert plan({"main_process_ip": "head"}, env=slurm(), gpus=4).value("main_process_ip") == "head"


def _torchrun_arg(p: LaunchPlan, name: str) -> str:
    return p.torchrun_args[p.torchrun_args.index(name) + 1]


def test_an_elastic_range_under_slurm_takes_its_rendezvous_endpoint_from_the_slurm_rule() -> None:
    p = plan({"nnodes": "1:2", "rdzv_backend": "c10d", "cpu": True}, env=slurm())
    assert _torchrun_arg(p, "--rdzv_endpoint") == "gpu07:24561"
    assert _torchrun_arg(p, "--nnodes") == "1:2"
    assert sources(p, "main_process_ip", "main_process_port") == {
        "main_process_ip": ("gpu07", "slurm: first host of SLURM_STEP_NODELIST"),
        "main_process_port": (24561, "slurm: 20000 + SLURM_JOB_ID % 1000 x 10 + SLURM_STEP_ID % 10"),
    }
    report = p.describe()  # --dry_run: the endpoint and where each half came from
    assert (
        "Note: rdzv_endpoint: gpu07:24561 (address from slurm: first host of SLURM_STEP_NODELIST; port from "
        "slurm: 20000 + SLURM_JOB_ID % 1000 x 10 + SLURM_STEP_ID % 10). That node hosts the rendezvous store"
    ) in report
    assert "pass --rdzv_endpoint HOST:PORT on a host that stays up" in report


def test_a_given_rendezvous_endpoint_wins_over_the_slurm_rule_and_the_note_names_both() -> None:
    p = plan({"num_machines": "1:2", "rdzv_endpoint": "login1:29400", "cpu": True}, env=slurm())
    assert _torchrun_arg(p, "--rdzv_endpoint") == "login1:29400"
    assert sources(p, "main_process_ip", "main_process_port", "nnodes") == {
        "main_process_ip": ("login1", "flag --rdzv_endpoint"),
        "main_process_port": (29400, "flag --rdzv_endpoint"),
        "nnodes": ("1:2", "flag --num_machines"),
    }
    assert (
        "main_process_ip=login1 (from flag --rdzv_endpoint) is used instead of the Slurm rule's gpu07 "
        "(slurm: first host of SLURM_STEP_NODELIST); every launcher of the job must be given the same"
    ) in "\n".join(p.notes)
    assert any(
        note.startswith("main_process_port=29400 (from flag --rdzv_endpoint) is used instead")
        for note in p.notes
    )
    assert "rdzv_endpoint: login1:29400 (from flag --rdzv_endpoint)." in p.notes
    # The same endpoint as the rule's: nothing to say.
    same = plan({"nnodes": "1:2", "rdzv_endpoint": "gpu07:24561", "cpu": True}, env=slurm())
    assert not any("instead of the Slurm rule" in note for note in same.notes)


def test_an_elastic_range_whose_largest_size_disagrees_with_the_allocation_names_the_typed_flag() -> None:
    with pytest.raises(LaunchError) as info:
        plan({"nnodes": "1:4", "cpu": True}, env=slurm())
    message = str(info.value)
    assert (
        "num_machines=4 (from flag --nnodes) disagrees with the Slurm allocation: num_machines=2" in message
    )
    assert "drop --nnodes so that 2 is used" in message


def test_one_node_keeps_the_single_machine_defaults() -> None:
    env = slurm(SLURM_STEP_NUM_NODES="1", SLURM_NNODES="1", SLURM_JOB_NUM_NODES="1", SLURM_STEP_NUM_TASKS="1",
                SLURM_NTASKS="1", SLURM_NODEID="0", SLURM_STEP_NODELIST="localhost", SLURM_GPUS_ON_NODE=None,
                SLURM_CPUS_PER_TASK="2")  # fmt: skip
    p = plan({"cpu": True, "num_processes": 2}, env=env)
    assert sources(p, "num_machines", "machine_rank", "main_process_ip") == {
        "num_machines": (1, "slurm: SLURM_STEP_NUM_NODES"),
        "machine_rank": (0, "slurm: SLURM_NODEID"),
        "main_process_ip": ("127.0.0.1", "default"),
    }
    assert p.settings["main_process_port"].source == "default" and p.child_env["OMP_NUM_THREADS"] == "1"
    assert plan({"cpu": True}, env=env).mode == "single"


def test_slurm_gpus_without_a_visible_gpu_run_one_cpu_process_per_node() -> None:
    p = plan(env=slurm(), gpus=0)
    assert sources(p, "num_processes") == {
        "num_processes": (2, "slurm: 1 process per machine (no GPU visible) x 2 machines")
    }
    assert any("SLURM_GPUS_ON_NODE=4, but no GPU is visible" in note for note in p.notes)
    assert plan(env=slurm(SLURM_GPUS_ON_NODE=None), gpus=2).settings["num_processes"].source == (
        "slurm: 2 visible GPUs per machine x 2 machines"
    )
    assert plan({"gpu_ids": "0,1,2"}, env=slurm(), gpus=4).value("num_processes") == 6


@pytest.mark.parametrize(
    ("flags", "config", "names"),
    [
        ({"num_machines": 4}, None, ("num_machines=4 (from flag --num_machines)",
                                     "num_machines=2 (from slurm: SLURM_STEP_NUM_NODES)", "drop --num_machines")),
        ({"machine_rank": 0}, None, ("machine_rank=0 (from flag --machine_rank)",
                                     "machine_rank=1 (from slurm: SLURM_NODEID)", "Drop --machine_rank so that 1 is used (Slurm gives")),
        ({}, LaunchConfig(machine_rank=0, num_machines=2), (f"machine_rank=0 (from config file {CONFIG_PATH})",
                                                             f"Remove machine_rank from the config file {CONFIG_PATH}")),
        ({"num_processes": 16}, None, ("num_processes=16 (from flag --num_processes)", "8 processes",
                                       "4 GPUs per node (SLURM_GPUS_ON_NODE)")),
    ],
)  # fmt: skip
def test_an_allocation_that_disagrees_is_refused_naming_both(
    flags: dict[str, Any], config: LaunchConfig | None, names: tuple[str, ...]
) -> None:
    with pytest.raises(LaunchError) as info:
        plan(flags, config, env=slurm(), gpus=4)
    assert all(name in str(info.value) for name in names), str(info.value)


def test_several_launchers_per_node_are_refused() -> None:
    with pytest.raises(
        LaunchError, match=r"srun started 8 tasks \(SLURM_STEP_NUM_TASKS\) on 2 nodes"
    ) as info:
        plan(env=slurm(SLURM_STEP_NUM_TASKS="8", SLURM_NTASKS="8"))
    assert "--ntasks-per-node=1" in str(info.value) and "srun python script.py" in str(info.value)


def test_an_unreadable_node_list_asks_for_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(LaunchError, match="--main_process_ip HOST") as info:
        plan(env=slurm(SLURM_STEP_NODELIST="gpu[07-"), gpus=4)
    assert "leaves a bracket open" in str(info.value)
    with pytest.raises(LaunchError, match="SLURM_NODEID='x' in the environment must be an integer"):
        plan(env=slurm(SLURM_NODEID="x"))
    with pytest.raises(LaunchError, match="SLURM_STEP_ID is set but not SLURM_NODEID"):
        plan(env=slurm(SLURM_NODEID=None))


def test_a_batch_script_without_srun_runs_on_one_node_and_says_so() -> None:
    batch = {
        "SLURM_JOB_ID": "77",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }
    p = plan({"cpu": True}, env=batch)
    assert sources(p, "num_machines", "machine_rank") == {
        "num_machines": (1, "default"),
        "machine_rank": (0, "default"),
    }
    assert len(p.warnings) == 1 and "srun --ntasks-per-node=1 accelerate launch" in p.warnings[0]
    assert plan({"cpu": True}, env={**batch, "SLURM_JOB_NUM_NODES": "1"}).warnings == []
    assert plan({"cpu": True, "num_machines": 1}, env=batch).warnings == []
    # The way out the disagreement error offers: a launcher placed by hand outside the srun step.
    with pytest.raises(LaunchError, match="env -u SLURM_STEP_ID"):
        plan({"cpu": True, "num_machines": 4}, env=slurm())
    by_hand = {"cpu": True, "num_processes": 4, "num_machines": 4, "machine_rank": 3, "main_process_ip": "n1"}
    p = plan(by_hand, env=slurm(SLURM_STEP_ID=None))
    assert (p.value("num_machines"), p.value("machine_rank"), p.notes, p.warnings) == (4, 3, [], [])


def test_outside_any_allocation_nothing_changes() -> None:
    p = plan({"cpu": True, "num_processes": 2}, env={"MASTER_ADDR": "elsewhere"})
    assert {s.source for s in p.settings.values()} <= {"default", "flag --cpu", "flag --num_processes"}
    assert p.notes == [] and p.value("main_process_ip") == "127.0.0.1"


# --- MPI: one launcher per machine -----------------------------------------------------------------
OMPI_RANK1 = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
              "OMPI_COMM_WORLD_LOCAL_RANK": "0"}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "rank_var", "size_var"),
    [
        (OMPI_RANK1, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        (
            {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "1"},
            "PMI_RANK",
            "PMI_SIZE",
        ),
        (
            {"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2"},
            "MV2_COMM_WORLD_RANK",
            "MV2_COMM_WORLD_SIZE",
        ),
    ],
)
def test_mpi_variables_give_machines_and_rank(env: dict[str, str], rank_var: str, size_var: str) -> None:
    p = plan({"cpu": True}, env={**env, "MASTER_ADDR": "head"})
    assert sources(p, "num_machines", "machine_rank", "main_process_ip", "num_processes") == {
        "num_machines": (2, f"mpi: {size_var}"),
        "machine_rank": (1, f"mpi: {rank_var}"),
        "main_process_ip": ("head", "environment MASTER_ADDR"),
        "num_processes": (2, "mpi: 1 CPU process per machine x 2 machines"),
    }
    assert p.value("main_process_port") == 29500 and "--node_rank 1" in " ".join(p.torchrun_args)
    assert f"MPI ({rank_var}): this launcher is rank 1 of 2" in p.describe()


def test_mpi_without_an_address_names_the_flag() -> None:
    with pytest.raises(LaunchError, match="rank 1 of an MPI job") as info:
        plan({"cpu": True}, env=OMPI_RANK1)
    assert "--main_process_ip HOST" in str(info.value) and "-x MASTER_ADDR" in str(info.value)
    p = plan({"cpu": True, "main_process_ip": "head"}, env=OMPI_RANK1)
    assert p.settings["main_process_ip"].source == "flag --main_process_ip"
    one = plan({"cpu": True}, env={"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"})
    assert (one.value("num_machines"), one.mode) == (1, "single")


def test_mpi_errors_several_launchers_a_disagreement_and_a_missing_size() -> None:
    with pytest.raises(LaunchError, match=r"OMPI_COMM_WORLD_LOCAL_SIZE=2\).*ppr:1:node"):
        plan({"cpu": True}, env={**OMPI_RANK1, "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    with pytest.raises(LaunchError, match=r"MPI_LOCALRANKID=1\).*-ppn 1"):
        plan({"cpu": True}, env={"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"})
    with pytest.raises(LaunchError) as info:
        plan({"cpu": True, "machine_rank": 0, "main_process_ip": "head"}, env=OMPI_RANK1)
    assert "machine_rank=0 (from flag --machine_rank)" in str(info.value)
    assert "machine_rank=1 (from mpi: OMPI_COMM_WORLD_RANK)" in str(info.value)
    with pytest.raises(LaunchError, match="PMIX_RANK gives this launcher's rank .* pass --num_machines N"):
        plan({"cpu": True}, env={"PMIX_RANK": "1"})
    p = plan({"cpu": True, "num_machines": 2, "main_process_ip": "head"}, env={"PMIX_RANK": "1"})
    assert sources(p, "machine_rank") == {"machine_rank": (1, "mpi: PMIX_RANK")}


def test_slurm_wins_over_mpi_variables_and_mpirun_hostfiles_derive_nothing() -> None:
    p = plan(env={**slurm(), "PMI_RANK": "5", "PMI_SIZE": "8"}, gpus=4)
    assert p.settings["machine_rank"].source == "slurm: SLURM_NODEID"
    # With a hostfile, mpirun started from this one launcher places every process itself.
    settings = dict(plan({"cpu": True}).settings)
    settings["mpirun_hostfile"] = dataclasses.replace(
        settings["mpirun_hostfile"], value="hosts", source="flag"
    )
    assert cluster.apply_allocation(settings, OMPI_RANK1, lambda: 0) == ([], [])
    assert settings["machine_rank"].source == "default"
