"""Slurm and MPI allocations as a source of launch settings: one ``accelerate launch`` per machine.

Under Slurm, ``srun --ntasks-per-node=1 accelerate launch ...`` inside ``sbatch`` or ``salloc`` runs
one launcher on every node of the step; under MPI, ``mpirun --map-by ppr:1:node accelerate launch
...`` (Open MPI) or ``mpiexec -ppn 1 ...`` (MPICH, Intel MPI) does the same. Each launcher then
starts its machine's processes with torch.distributed.run, exactly as if the machine count, machine
rank and main address had been passed as flags. This module reads those values from the scheduler's
variables, only where the command line, the environment contract and the config file say nothing,
and refuses a given value that contradicts the allocation (it would split the job or hang it):

=================  ============================================================================
setting            Slurm (srun step)                          MPI (one launcher per machine)
=================  ============================================================================
num_machines       SLURM_STEP_NUM_NODES, else SLURM_NNODES /  OMPI_COMM_WORLD_SIZE, PMI_SIZE,
                   SLURM_JOB_NUM_NODES                        MV2_COMM_WORLD_SIZE
machine_rank       SLURM_NODEID                               OMPI_COMM_WORLD_RANK, PMI_RANK,
                                                              PMIX_RANK, MV2_COMM_WORLD_RANK
main_process_ip    MASTER_ADDR, else the first host of        MASTER_ADDR; else it must be given
                   SLURM_STEP_NODELIST / SLURM_JOB_NODELIST   (--main_process_ip)
main_process_port  MASTER_PORT, else slurm_port(job, step)    MASTER_PORT, else 29500
num_processes      SLURM_GPUS_ON_NODE per node (visible GPUs  visible GPUs per node (1 on CPU)
                   when unset; 1 on CPU) x machines           x machines
threads            SLURM_CPUS_PER_TASK (else SLURM_CPUS_ON_NODE) // processes per node
=================  ============================================================================

Address and port are derived for several machines only (on one, 127.0.0.1 and 29500 or a free port
are safest). A script that srun or mpirun starts as every rank, without a launcher, is read by
:mod:`accelerate.state.environment`; here several launchers on one machine are refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelerate.launch.checks import LaunchError
from accelerate.launch.hostlist import HostListError, slurm_hosts

if TYPE_CHECKING:
    from accelerate.launch.plan import Setting

SLURM_PORT_BASE = 20000  # below Linux's ephemeral range (32768+), so no outgoing connection holds it


def slurm_port(job_id: int, step_id: int) -> int:
    """The main port every node of one srun step computes alike: 20000 + the job id's last three
    digits x 10 + the step id's last digit (job 123456, step 1: 24561). Successive jobs and the steps
    of one job get different ports, so a port still held by an earlier run is rarely met."""
    return SLURM_PORT_BASE + (job_id % 1000) * 10 + step_id % 10


# --- reading an allocation ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Derived:
    """A value read from the scheduler and where from (``slurm: SLURM_NODEID``)."""

    value: Any
    source: str


@dataclass(frozen=True)
class Allocation:
    """What the scheduler says about this launcher's machine and its peers."""

    scheduler: str  # "slurm" | "mpi": the prefix of every source
    machine_rank: Derived
    num_machines: Derived | None  # None: the variables do not say (PMIx gives a rank only)
    main_address: Derived | None = None
    main_port: Derived | None = None
    gpus_per_node: Derived | None = None
    cpus: Derived | None = None  # CPUs this launcher's task holds
    summary: str = ""


def _int_var(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise LaunchError(
            f"{name}={raw!r} in the environment must be an integer (is it set by hand?)."
        ) from None


def _first_int(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, int] | None:
    for name in names:
        value = _int_var(env, name)
        if value is not None:
            return name, value
    return None


def _leading_int(raw: str) -> int | None:
    """Slurm writes per-node counts as ``4(x2)`` or ``2,1``: the first node's count."""
    digits = ""
    for char in raw.strip():
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else None


def slurm_allocation(env: Mapping[str, str]) -> Allocation | None:
    """The srun step this launcher runs in, or ``None`` outside one (a batch script, an salloc shell)."""
    if not env.get("SLURM_STEP_ID") or not env.get("SLURM_JOB_ID"):
        return None
    nodes = _first_int(env, ("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"))
    tasks = _first_int(env, ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"))
    if nodes is not None and tasks is not None and tasks[1] != nodes[1]:
        raise LaunchError(
            f"srun started {tasks[1]} tasks ({tasks[0]}) on {nodes[1]} nodes ({nodes[0]}), but accelerate launch "
            "starts every process of its node itself, so it must run once per node: "
            "`srun --ntasks-per-node=1 accelerate launch ...`. (To have srun start every process of the script "
            "instead, run `srun python script.py` without accelerate launch.)"
        )
    rank = _first_int(env, ("SLURM_NODEID",))
    if rank is None:
        raise LaunchError(
            "SLURM_STEP_ID is set but not SLURM_NODEID, which srun always sets (were the variables copied by hand?). "
            "Unset SLURM_STEP_ID and pass --num_machines, --machine_rank and --main_process_ip yourself."
        )
    # Only the port uses the ids; a step id that is not a number (Slurm's named steps) counts as 0.
    job, step = _as_int(env["SLURM_JOB_ID"]) or 0, _as_int(env["SLURM_STEP_ID"]) or 0
    gpus = _first_int(env, ("SLURM_GPUS_ON_NODE",))
    cpus = _first_int(env, ("SLURM_CPUS_PER_TASK",))
    on_node = _leading_int(env.get("SLURM_CPUS_ON_NODE", ""))
    if cpus is None and on_node:
        cpus = ("SLURM_CPUS_ON_NODE", on_node)
    list_var = next(
        (n for n in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") if env.get(n)), None
    )
    address = None
    if list_var is not None:
        address = Derived(env[list_var], f"slurm: first host of {list_var}")  # expanded only when used
    of_count = f" of {nodes[1]}" if nodes else ""
    return Allocation(
        scheduler="slurm",
        machine_rank=Derived(rank[1], "slurm: SLURM_NODEID"),
        num_machines=Derived(nodes[1], f"slurm: {nodes[0]}") if nodes else None,
        main_address=address,
        main_port=Derived(
            slurm_port(job, step), "slurm: 20000 + SLURM_JOB_ID % 1000 x 10 + SLURM_STEP_ID % 10"
        ),
        gpus_per_node=Derived(gpus[1], "SLURM_GPUS_ON_NODE") if gpus else None,
        cpus=Derived(cpus[1], cpus[0]) if cpus else None,
        summary=f"Slurm job {job}, step {step}: this is node {rank[1]}{of_count} (one launcher per node).",
    )


# (rank, size, local size, local rank) variables of each MPI implementation, most specific first.
_MPI_VARIABLES: tuple[tuple[str, str | None, str | None, str | None], ...] = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", "MPI_LOCALRANKID"),  # MPICH's Hydra, Intel MPI
    ("PMIX_RANK", None, None, None),  # PMIx names the rank only
)  # fmt: skip


def mpi_allocation(env: Mapping[str, str]) -> Allocation | None:
    """The MPI job this launcher is a rank of, or ``None`` when no MPI variable is set."""
    for rank_var, size_var, local_size_var, local_rank_var in _MPI_VARIABLES:
        rank = _int_var(env, rank_var)
        if rank is None:
            continue
        local_size = _int_var(env, local_size_var) if local_size_var else None
        local_rank = _int_var(env, local_rank_var) if local_rank_var else None
        if (local_size or 1) > 1 or (local_rank or 0) > 0:
            shown = local_size_var if local_size and local_size > 1 else local_rank_var
            raise LaunchError(
                f"MPI started several launchers on this machine ({shown}={env.get(str(shown))}), but accelerate "
                "launch starts every process of its machine itself, so it must run once per machine: "
                "`mpirun --map-by ppr:1:node accelerate launch ...` (Open MPI) or `mpiexec -ppn 1 ...` (MPICH, "
                "Intel MPI). (To have mpirun start every process of the script, run `mpirun python script.py`.)"
            )
        size = _int_var(env, size_var) if size_var else None
        of_size = "" if size is None else f" of {size}"
        return Allocation(
            scheduler="mpi",
            machine_rank=Derived(rank, f"mpi: {rank_var}"),
            num_machines=Derived(size, f"mpi: {size_var}") if size is not None else None,
            summary=f"MPI ({rank_var}): this launcher is rank {rank}{of_size}, one per machine.",
        )
    return None


def detect(env: Mapping[str, str]) -> Allocation | None:
    """Slurm's srun step first (``srun --mpi=pmix`` sets MPI variables too, and Slurm says more)."""
    return slurm_allocation(env) or mpi_allocation(env)


# --- filling the launch settings ---------------------------------------------------------------------
def apply_allocation(
    settings: dict[str, Setting], env: Mapping[str, str], gpu_count: Callable[[], int]
) -> tuple[list[str], list[str]]:
    """Fills, from the Slurm step or MPI job this launcher runs in, the settings nothing else gave.

    Runs after config file < environment < flags were resolved and before the process count's own
    default. A value that was given and contradicts the allocation is an error naming both.

    Returns:
        ``(notes, warnings)`` for the plan (the allocation in one line; an sbatch script's launcher
        that would use one of several nodes).

    Raises:
        LaunchError: a contradiction, several launchers on one machine, or a main address that
            cannot be derived.
    """
    if settings["tpu"].value or settings["mpirun_hostfile"].value:
        return [], []  # torch_xla or mpirun (started from here) place the processes themselves
    allocation = detect(env)
    if allocation is None:
        return [], _outside_srun(settings, env)
    notes = [allocation.summary]
    name = {"slurm": "Slurm", "mpi": "MPI"}[allocation.scheduler]
    machines_fix = (
        "Either {drop} so that {value} is used, or "
        + {
            "slurm": "ask Slurm for that many nodes (sbatch --nodes=N, or srun --nodes=N); to place the launchers by "
            "hand instead, start them outside the srun step (env -u SLURM_STEP_ID accelerate launch ...)",
            "mpi": "start that many launchers, one per machine (mpirun -np N --map-by ppr:1:node)",
        }[allocation.scheduler]
    )
    if allocation.num_machines is None and settings["num_machines"].source == "default":
        raise LaunchError(
            f"{allocation.machine_rank.source.split(': ')[1]} gives this launcher's rank but no variable gives the "
            "number of machines; pass --num_machines N."
        )
    what = f"{name} allocation"
    _take(settings, "num_machines", allocation.num_machines, what, machines_fix)
    rank_fix = f"{{drop}} so that {{value}} is used ({name} gives each launcher its rank)"
    _take(settings, "machine_rank", allocation.machine_rank, what, rank_fix)
    machines = _as_int(settings["num_machines"].value)
    if machines != 1:
        _main_endpoint(settings, env, allocation)
        notes += _given_endpoint_notes(settings, allocation)
    _processes(settings, allocation, gpu_count, notes)
    _threads(settings, env, allocation)
    return notes, []


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None  # not a plain count (an elastic MIN:MAX range): nothing to compare


def _replace(settings: dict[str, Setting], name: str, value: Any, source: str) -> None:
    settings[name] = dataclasses.replace(settings[name], value=value, source=source)


def _drop(setting: Setting) -> str:
    """How to stop giving a setting, in the words of where it came from."""
    if setting.from_flag:
        return f"drop {setting.flag}"
    if setting.source.startswith("config file "):
        return f"remove {setting.name} from the {setting.source}"
    return f"stop setting it ({setting.source})"


def _take(settings: dict[str, Setting], name: str, derived: Derived | None, what: str, fix: str) -> None:
    """Uses ``derived`` where the setting was not given; refuses a given value that differs, saying
    ``fix`` (a template: ``{drop}`` is how to stop giving it, ``{value}`` the allocation's value)."""
    current = settings[name]
    if derived is None:
        return
    if current.source == "default":
        _replace(settings, name, derived.value, derived.source)
        return
    given = _as_int(current.value)
    if given is not None and given != int(derived.value):
        how = fix.format(drop=_drop(current), value=derived.value)
        raise LaunchError(
            f"{name}={current.value} (from {current.source}) disagrees with the {what}: {name}={derived.value} "
            f"(from {derived.source}). {how[0].upper()}{how[1:]}."
        )


def _main_endpoint(settings: dict[str, Setting], env: Mapping[str, str], allocation: Allocation) -> None:
    """Machine 0's address and port, which every launcher must agree on."""
    if settings["main_process_ip"].value is None:
        if env.get("MASTER_ADDR"):
            _replace(settings, "main_process_ip", env["MASTER_ADDR"], "environment MASTER_ADDR")
        elif allocation.main_address is not None:
            nodelist = str(allocation.main_address.value)
            try:
                host = slurm_hosts(nodelist)[0]
            except HostListError as exc:
                raise LaunchError(
                    f"Cannot find the first node of this Slurm job: {exc}. Pass --main_process_ip HOST (the "
                    'first node, `scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1`).'
                ) from None
            _replace(settings, "main_process_ip", host, allocation.main_address.source)
        else:
            rank = allocation.machine_rank
            raise LaunchError(
                f"This launcher is rank {rank.value} of an MPI job ({rank.source}), but MPI does not say which host "
                "runs rank 0, and every launcher must reach it. Pass --main_process_ip HOST (the first host of the "
                "hostfile), or export MASTER_ADDR to every rank (Open MPI: `mpirun -x MASTER_ADDR=HOST ...`; "
                "MPICH / Intel MPI: `mpiexec -genv MASTER_ADDR HOST ...`)."
            )
    port = settings["main_process_port"]
    if port.value is None:
        if env.get("MASTER_PORT"):
            value = _as_int(env["MASTER_PORT"])
            if value is None:
                raise LaunchError(
                    f"MASTER_PORT={env['MASTER_PORT']!r} in the environment must be a port number."
                )
            _replace(settings, "main_process_port", value, "environment MASTER_PORT")
        elif allocation.main_port is not None:
            _replace(settings, "main_process_port", allocation.main_port.value, allocation.main_port.source)


def _given_endpoint_notes(settings: dict[str, Setting], allocation: Allocation) -> list[str]:
    """A given address or port (a flag, MASTER_ADDR, the config file) wins over the Slurm rule, as for a
    single launch; the note names both, since every launcher must then be given the same value."""
    out = []
    rule: dict[str, Derived | None] = {"main_process_ip": None, "main_process_port": allocation.main_port}
    if allocation.main_address is not None:
        with contextlib.suppress(HostListError):
            first = slurm_hosts(str(allocation.main_address.value))[0]
            rule["main_process_ip"] = Derived(first, allocation.main_address.source)
    for name, derived in rule.items():
        setting = settings[name]
        if derived is None or setting.source == derived.source or str(setting.value) == str(derived.value):
            continue
        out.append(
            f"{name}={setting.value} (from {setting.source}) is used instead of the Slurm rule's {derived.value} "
            f"({derived.source}); every launcher of the job must be given the same {name}."
        )
    return out


def _processes(
    settings: dict[str, Setting], allocation: Allocation, gpu_count: Callable[[], int], notes: list[str]
) -> None:
    """Processes per machine when not given; a given count that wants more GPUs than Slurm granted."""
    procs, machines = settings["num_processes"], _as_int(settings["num_machines"].value)
    gpus = allocation.gpus_per_node
    cpu = bool(settings["cpu"].value)
    if procs.value is not None:
        total = _as_int(procs.value)
        if (
            gpus is not None
            and not cpu
            and total
            and machines
            and total % machines == 0
            and total // machines > gpus.value
        ):
            raise LaunchError(
                f"num_processes={procs.value} (from {procs.source}) puts {total // machines} processes on each of "
                f"{machines} machines, but Slurm granted {gpus.value} GPUs per node ({gpus.source}). Either "
                f"{_drop(procs)} to run one process per GPU, or ask Slurm for more GPUs (--gpus-per-node)."
            )
        return
    if machines is None:
        return  # an elastic range: the process count per machine keeps its own default
    per_node, why = _per_node(settings, gpus, gpu_count, notes)
    _replace(
        settings, "num_processes", per_node * machines, f"{allocation.scheduler}: {why} x {machines} machines"
    )


def _per_node(
    settings: dict[str, Setting], gpus: Derived | None, gpu_count: Callable[[], int], notes: list[str]
) -> tuple[int, str]:
    if settings["cpu"].value:
        return 1, "1 CPU process per machine"
    gpu_ids = settings["gpu_ids"].value
    if gpu_ids not in (None, "all"):
        count = len([g for g in str(gpu_ids).split(",") if g.strip()])
        return count, f"one per id in gpu_ids={gpu_ids}"
    if gpus is not None and gpus.value > 0:
        if gpu_count() > 0:
            return int(gpus.value), f"{gpus.source}={gpus.value} per machine"
        notes.append(f"{gpus.source}={gpus.value}, but no GPU is visible here: one CPU process per machine.")
        return 1, "1 process per machine (no GPU visible)"
    count = gpu_count()
    if count > 0:
        return count, f"{count} visible GPU{'s' if count > 1 else ''} per machine"
    return 1, "1 process per machine (no GPU visible)"


def _threads(settings: dict[str, Setting], env: Mapping[str, str], allocation: Allocation) -> None:
    """Each process's share of the CPUs Slurm granted this launcher (OMP_NUM_THREADS, when not set)."""
    cpus = allocation.cpus
    if cpus is None or settings["num_cpu_threads_per_process"].value is not None or "OMP_NUM_THREADS" in env:
        return
    total, machines = _as_int(settings["num_processes"].value), _as_int(settings["num_machines"].value)
    if not total or not machines:
        return
    per_node = max(total // machines, 1)
    _replace(
        settings, "num_cpu_threads_per_process", max(int(cpus.value) // per_node, 1),
        f"{allocation.scheduler}: {cpus.source}={cpus.value} // {per_node} process{'es' if per_node > 1 else ''} per machine",
    )  # fmt: skip


def _outside_srun(settings: dict[str, Setting], env: Mapping[str, str]) -> list[str]:
    """An sbatch script or salloc shell that runs accelerate launch directly uses one of its nodes."""
    if (
        not env.get("SLURM_JOB_ID")
        or env.get("SLURM_STEP_ID")
        or settings["num_machines"].source != "default"
    ):
        return []
    nodes = _first_int(env, ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"))
    if nodes is None or nodes[1] <= 1:
        return []
    return [
        f"Slurm job {env['SLURM_JOB_ID']} has {nodes[1]} nodes ({nodes[0]}), but accelerate launch was not started "
        "by srun, so it runs on this machine only. To use every node, start it once per node: "
        "`srun --ntasks-per-node=1 accelerate launch ...` (see examples/slurm/)."
    ]
