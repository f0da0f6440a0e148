"""set_trigger / check_trigger: a flag raised on one process is seen by every process, once."""

from __future__ import annotations

from accelerate import Accelerator
from tests.helpers.pool import WorkerPool


def test_trigger_in_one_process() -> None:
    accelerator = Accelerator(cpu=True)
    assert accelerator.flag_tensor is None and accelerator.check_trigger() is False
    accelerator.set_trigger()
    assert int(accelerator.flag_tensor) == 1  # type: ignore[arg-type]
    assert accelerator.check_trigger() is True
    assert accelerator.check_trigger() is False  # cleared by the check that saw it


def _trigger_from_rank_one() -> list[bool]:
    accelerator = Accelerator(cpu=True)
    seen = [accelerator.check_trigger()]
    if accelerator.process_index == 1:
        accelerator.set_trigger()
    seen.append(accelerator.check_trigger())
    seen.append(accelerator.check_trigger())
    return seen


def test_a_trigger_set_on_one_rank_is_seen_by_all(pool2: WorkerPool) -> None:
    assert pool2.run(_trigger_from_rank_one) == [[False, True, False], [False, True, False]]
