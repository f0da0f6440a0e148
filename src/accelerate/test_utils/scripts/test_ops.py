"""Checks of the collectives on however many processes were launched (``accelerate launch test_ops.py``).

Each check raises ``AssertionError`` with what was expected and what arrived; ``main()`` runs them
all, reports each, and exits non-zero if any failed.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable

import torch

from accelerate.state import PartialState


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _rank_tensor(state: PartialState) -> torch.Tensor:
    """``[3r+1, 3r+2, 3r+3]`` on process ``r``: every process holds different values."""
    return torch.arange(1, 4, dtype=torch.float32, device=state.device) + 3 * state.process_index


def test_gather(state: PartialState) -> None:
    from accelerate.utils import gather

    got = gather(_rank_tensor(state)).cpu()
    expected = torch.arange(1, 3 * state.num_processes + 1, dtype=torch.float32)
    _expect(torch.equal(got, expected), f"gather: expected {expected.tolist()}, got {got.tolist()}")


def test_gather_object(state: PartialState) -> None:
    from accelerate.utils import gather_object

    got = gather_object([state.process_index])
    _expect(got == list(range(state.num_processes)), f"gather_object: expected ranks in order, got {got}")


def test_broadcast(state: PartialState) -> None:
    from accelerate.utils import broadcast

    got = broadcast(_rank_tensor(state)).cpu()
    _expect(torch.equal(got, torch.tensor([1.0, 2.0, 3.0])), f"broadcast from 0: got {got.tolist()}")


def test_broadcast_object_list(state: PartialState) -> None:
    from accelerate.utils import broadcast_object_list

    got = broadcast_object_list([f"from {state.process_index}", state.process_index])
    _expect(got == ["from 0", 0], f"broadcast_object_list from 0: got {got}")


def test_pad_across_processes(state: PartialState) -> None:
    from accelerate.utils import pad_across_processes

    mine = torch.ones(state.process_index + 1, device=state.device)
    got = pad_across_processes(mine).cpu()
    expected = torch.zeros(state.num_processes)
    expected[: state.process_index + 1] = 1
    _expect(
        torch.equal(got, expected), f"pad_across_processes: expected {expected.tolist()}, got {got.tolist()}"
    )


def test_reduce_sum(state: PartialState) -> None:
    from accelerate.utils import reduce

    got = reduce(_rank_tensor(state), "sum").cpu()
    n = state.num_processes
    expected = torch.tensor([1.0, 2.0, 3.0]) * n + 3 * sum(range(n))
    _expect(torch.allclose(got, expected), f"reduce sum: expected {expected.tolist()}, got {got.tolist()}")


def test_reduce_mean(state: PartialState) -> None:
    from accelerate.utils import reduce

    got = reduce(_rank_tensor(state), "mean").cpu()
    n = state.num_processes
    expected = torch.tensor([1.0, 2.0, 3.0]) + 3 * sum(range(n)) / n
    _expect(torch.allclose(got, expected), f"reduce mean: expected {expected.tolist()}, got {got.tolist()}")


CHECKS: list[Callable[[PartialState], None]] = [
    test_gather, test_gather_object, test_broadcast, test_broadcast_object_list, test_pad_across_processes,
    test_reduce_sum, test_reduce_mean,
]  # fmt: skip


def run_checks(state: PartialState, checks: list[Callable[[PartialState], None]]) -> list[str]:
    """Runs every check (a failure does not stop the rest); returns the failures' reports."""
    failures = []
    for check in checks:
        try:
            check(state)
        except Exception:  # noqa: BLE001 - reported below, with its traceback
            failures.append(
                f"[process {state.process_index}] {check.__name__} FAILED\n{traceback.format_exc()}"
            )
        else:
            state.print(f"{check.__name__}: ok")
    return failures


def run_and_report(checks: list[Callable[[PartialState], None]]) -> int:
    """A check script's exit code: runs ``checks``, prints the failures, waits for every process."""
    state = PartialState()
    failures = run_checks(state, checks)
    for failure in failures:
        print(failure, file=sys.stderr)
    state.wait_for_everyone()
    return 1 if failures else 0


def main() -> int:
    return run_and_report(CHECKS)


if __name__ == "__main__":
    raise SystemExit(main())
