"""`accelerate.progress.tqdm` (upstream's `accelerate.utils.tqdm`) draws one bar per node.

Only the local main process's bar is enabled.
"""

from __future__ import annotations

import io

import pytest

from accelerate.progress import tqdm
from accelerate.state import PartialState
from tests.helpers.pool import WorkerPool


def _bar_states(main_process_only: bool) -> dict[str, object]:
    out = io.StringIO()
    bar = tqdm(range(3), main_process_only=main_process_only, file=out, desc="steps")
    disabled = bar.disable  # read before close(), which disables every bar
    consumed = list(bar)
    bar.close()
    return {
        "rank": PartialState().process_index,
        "disabled": disabled,
        "items": consumed,
        "drew": "steps" in out.getvalue(),
    }


def test_only_the_main_process_draws(pool2: WorkerPool) -> None:
    r0, r1 = pool2.run(_bar_states, True)
    assert (r0["rank"], r1["rank"]) == (0, 1)
    assert r0["disabled"] is False and r0["drew"] is True
    assert r1["disabled"] is True and r1["drew"] is False
    assert r0["items"] == r1["items"] == [0, 1, 2]  # a disabled bar still yields everything


def test_every_process_draws_when_asked(pool2: WorkerPool) -> None:
    results = pool2.run(_bar_states, False)
    assert [r["drew"] for r in results] == [True, True]


def test_single_process_draws_and_explicit_disable_wins() -> None:
    out = io.StringIO()
    assert tqdm(range(2), file=out).disable is False
    assert tqdm(range(2), file=out, disable=True).disable is True


def test_old_positional_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="main_process_only=True"):
        tqdm(True, range(3))
