"""The launchable scripts pass on one process and on two (run on the pool's ranks)."""

from __future__ import annotations

from accelerate.test_utils import test_ops, test_script, test_sync
from tests.helpers.pool import WorkerPool


def _ops_main() -> int:
    return test_ops.main()


def _sync_main() -> int:
    return test_sync.main()


def test_scripts_are_modules_with_main() -> None:
    for module in (test_ops, test_script, test_sync):
        assert callable(module.main) and module.__name__.startswith("accelerate.test_utils.scripts.")


def test_ops_one_process() -> None:
    assert _ops_main() == 0


def test_ops_two_processes(pool2: WorkerPool) -> None:
    assert pool2.run(_ops_main) == [0, 0]


def test_sync_one_process() -> None:
    assert _sync_main() == 0


def test_sync_two_processes(pool2: WorkerPool) -> None:
    assert pool2.run(_sync_main) == [0, 0]


def _failing_check(state: object) -> None:
    raise AssertionError("expected 1, got 2")


def test_a_failing_check_is_reported_and_the_rest_run() -> None:
    from accelerate.state import PartialState

    ran: list[str] = []

    def passing(state: object) -> None:
        ran.append("passing")

    failures = test_ops.run_checks(PartialState(), [_failing_check, passing])
    assert ran == ["passing"] and len(failures) == 1
    assert "_failing_check FAILED" in failures[0] and "expected 1, got 2" in failures[0]
