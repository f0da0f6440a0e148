"""What a chaos run does: the scenarios, the kinds of fault, and a seeded plan of when each one lands.

A *scenario* is a way of running the training job (its launch flags) with the faults it must
survive and what its end must look like. One exists today: ``restart`` (``accelerate launch
--max_restarts N``, ``save_state`` every few steps, ``load_state(missing_ok=True)`` at every start);
a fault-tolerant mode is one more row of :data:`SCENARIOS`, with its own kinds (a replica group
killed) and its own end check (replicas equal, every sample once).

A *fault* lands at an optimizer-step boundary of one rank (``step``): the worker
(``tests/chaos/worker.py``) stops there and announces it, and the runner delivers it from outside
(a signal), or the worker arms a write fault for the save that follows. Which steps, which ranks,
which files: drawn from one seed, printed by the runner, so a failing run replays exactly.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class FaultKind:
    name: str
    what: str  # one line for the report
    at_save: bool = False  # lands during the save that follows its step (a save step is drawn)
    rank_files: tuple[str, ...] = ()  # for a write fault: the files it may hit ({rank} filled in)


KINDS: dict[str, FaultKind] = {
    kind.name: kind
    for kind in (
        FaultKind("kill_rank", "SIGKILL of one training process"),
        FaultKind(
            "kill_launcher", "SIGKILL of the launcher (the runner relaunches it, as a scheduler would)"
        ),
        FaultKind("stall_rank", "SIGSTOP of one training process (a stalled rank)"),
        FaultKind(
            "disk_full",
            "the disk fills during a save (a small tmpfs filled for real, else ENOSPC from one file's write)",
            at_save=True,
            rank_files=("random_states_{rank}.pkl",),
        ),
        FaultKind(
            "kill_in_save",
            "SIGKILL of one process in the middle of writing a checkpoint file",
            at_save=True,
            rank_files=("random_states_{rank}.pkl",),
        ),
    )
}
# Files only process 0 writes (the model and optimizer of a DDP run).
_MAIN_FILES = ("model.safetensors", "optimizer.bin")


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    launch_flags: tuple[str, ...]
    kinds: tuple[str, ...]  # what a random plan draws from, in this order for "one of each"
    end_check: str  # what the final parameters must equal


SCENARIOS: dict[str, Scenario] = {
    "restart": Scenario(
        name="restart",
        what="restart and resume: torch's elastic agent restarts every process, load_state resumes",
        launch_flags=("--monitor_interval", "0.2"),
        kinds=("kill_rank", "kill_launcher", "disk_full", "stall_rank", "kill_in_save"),
        end_check="bitwise equal to an uninterrupted run's parameters and optimizer state",
    ),
}


@dataclass(frozen=True)
class Job:
    """The training run the faults land in: the bundled example, kept small and deterministic."""

    num_processes: int = 2
    epochs: int = 2
    train_samples: int = 1024
    batch_size: int = 32
    checkpoint_every: int = 3
    process_group_timeout: float = 20.0

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.train_samples // (self.batch_size * self.num_processes))

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    def save_steps(self) -> list[int]:
        """Steps after which the example saves (it skips the last step of each epoch)."""
        return [
            s
            for s in range(1, self.total_steps + 1)
            if s % self.checkpoint_every == 0 and s % self.steps_per_epoch
        ]

    def script_args(self, checkpoint_dir: str) -> list[str]:
        return [
            "--epochs", str(self.epochs), "--train_samples", str(self.train_samples),
            "--batch_size", str(self.batch_size), "--eval_samples", "128",
            "--checkpoint_dir", checkpoint_dir, "--checkpoint_every", str(self.checkpoint_every),
            "--process_group_timeout", str(self.process_group_timeout),
        ]  # fmt: skip


@dataclass(frozen=True)
class Fault:
    id: int
    kind: str
    rank: int
    step: int
    file: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self, with_file: bool = True) -> str:
        where = f" writing {self.file}" if self.file and with_file else ""
        return f"#{self.id} {self.kind} of rank {self.rank} after step {self.step}{where}"


def make_plan(seed: int, job: Job, kinds: list[str]) -> list[Fault]:
    """One fault per entry of ``kinds``, each at its own step (a save step for a write fault).

    Steps are distinct and leave the run's first and last step alone, so every fault lands while
    the job trains; the order of ``kinds`` says nothing about when each lands.
    """
    rng = random.Random(seed)
    free = list(range(2, job.total_steps))
    saves = [s for s in job.save_steps() if s in free]
    faults: list[Fault] = []
    for index, name in enumerate(kinds):
        kind = KINDS[name]
        pool = saves if kind.at_save else free
        if not pool:
            raise ValueError(f"the job has no free step left for a {name} fault; give it more steps")
        step = rng.choice(pool)
        for taken in (free, saves):
            if step in taken:
                taken.remove(step)
        rank = rng.randrange(job.num_processes)
        file = ""
        if kind.rank_files:
            choices = [f.format(rank=rank) for f in kind.rank_files] + (
                list(_MAIN_FILES) if rank == 0 else []
            )
            file = rng.choice(choices)
        faults.append(Fault(id=index, kind=name, rank=rank, step=step, file=file))
    return sorted(faults, key=lambda f: f.step)


def random_kinds(seed: int, scenario: Scenario, count: int) -> list[str]:
    """``count`` kinds drawn from the scenario, each kind at least once when ``count`` allows."""
    rng = random.Random(seed ^ 0x5EED)
    kinds = list(scenario.kinds)[:count]
    kinds += [rng.choice(scenario.kinds) for _ in range(count - len(kinds))]
    rng.shuffle(kinds)
    return kinds
