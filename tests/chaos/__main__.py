"""``make chaos``: rounds of the bundled example under random faults until the time is up.

    python -m tests.chaos [--seconds 120] [--seed N] [--faults 5] [--scenario restart] [--out DIR]

Each round draws a plan from its seed (the first round's seed is printed: pass it back with
``--seed``, or ``make chaos CHAOS_SEED=N``, to replay a failure), runs the job through every fault,
and checks the end: the uninterrupted run's parameters and optimizer state (bitwise), no process
left, every checkpoint folder verified against its manifest. Exit status 0 only when every round
passed.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.plan import SCENARIOS, Job, random_kinds
from tests.chaos.replicas import replica_round
from tests.chaos.report import kinds_legend
from tests.chaos.soak import chaos_round, reference_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=120.0, help="start new rounds until this much time passed"
    )
    parser.add_argument("--seed", type=int, default=None, help="the first round's seed (default: random)")
    parser.add_argument("--faults", type=int, default=5, help="faults per round (at least one of each kind)")
    parser.add_argument(
        "--scenario",
        default="all",
        choices=["all", "fault_tolerance", *sorted(SCENARIOS)],
        help="restart: rounds under random faults; fault_tolerance: one replica-group kill (torchft); "
        "all (default): restart rounds, then one fault_tolerance round",
    )
    parser.add_argument(
        "--disk_full",
        choices=["tmpfs", "hook"],
        default="tmpfs",
        help="fill a small tmpfs for real (needs root; else the hook) or raise ENOSPC from one file's write",
    )
    parser.add_argument("--out", default=None, help="keep every round's folder here (default: a temp folder)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="accelerate-chaos-"))
    started = time.monotonic()
    failed = rounds = 0
    if args.scenario in ("all", "restart"):
        passed, count = _restart_rounds(root, seed, args)
        failed, rounds = failed + count - passed, rounds + count
    if args.scenario in ("all", "fault_tolerance"):
        if importlib.util.find_spec("torchft") is None:
            print(
                "chaos: fault_tolerance round skipped: torchft is not installed (pip install accelerate[torchft])"
            )
        else:
            done = replica_round(root / "replicas", seed)
            verdict = "PASS" if done.passed else "FAIL"
            print(f"chaos: fault_tolerance round (seed {seed}) {verdict}:\n{done.report}")
            for problem in done.problems:
                print(f"  problem: {problem}")
            failed, rounds = failed + (not done.passed), rounds + 1
    print(
        f"chaos: {rounds - failed} of {rounds} round(s) passed in {time.monotonic() - started:.0f} s (seed {seed})"
    )
    return 1 if failed else 0


def _restart_rounds(root: Path, seed: int, args: argparse.Namespace) -> tuple[int, int]:
    """Rounds of the restart scenario until ``args.seconds`` passed: (passed, run)."""
    scenario = SCENARIOS["restart"]
    job = Job()
    print(
        f"chaos: seed {seed} (replay: make chaos CHAOS_SEED={seed}); scenario {scenario.name}: {scenario.what}"
    )
    print(f"chaos: {job.num_processes} processes, {job.total_steps} optimizer steps, a checkpoint every "
          f"{job.checkpoint_every}; folders under {root}")  # fmt: skip
    print("chaos: the kinds of fault:\n" + kinds_legend())
    started = time.monotonic()
    reference = reference_run(root / "reference", job, scenario)
    print(f"chaos: reference run done in {time.monotonic() - started:.1f} s")
    failed = 0
    index = 0
    while index == 0 or time.monotonic() - started < args.seconds:
        round_seed = seed + index
        kinds = random_kinds(round_seed, scenario, args.faults)
        folder = root / f"round_{index}"
        done = chaos_round(folder, round_seed, job, scenario, kinds, reference, args.disk_full == "tmpfs")
        verdict = "PASS" if done.passed else "FAIL"
        print(f"chaos: round {index} (seed {round_seed}) {verdict}: end state {scenario.end_check}")
        print(done.report, flush=True)
        failed += not done.passed
        index += 1
    return index - failed, index


if __name__ == "__main__":
    sys.exit(main())
