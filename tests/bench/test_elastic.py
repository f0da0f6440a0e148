"""The elastic bench's clock: a re-formation is timed to the first step of a process started after
the death, never to a step the old group logged an instant after it (the 0.0001 s "restart" of
2026-11-29), and an impossible time raises instead of becoming a row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from bench.elastic import check_possible, configured_waits, recovery

DIED = 1000.0


def _process(
    out: Path, pid: int, times: tuple[float, float, float], world: int, attempt: int, steps: list[float]
) -> None:
    started, imported, ready = times
    (out / f"proc-{pid}.txt").write_text(f"{started} {imported} {ready} {world} {attempt}\n")
    (out / f"steps-{pid}.txt").write_text("".join(f"{t} {world} {attempt}\n" for t in steps))


def test_a_step_of_the_old_group_just_after_the_death_is_not_the_restart(tmp_path: Path) -> None:
    # Rank 0 of the first attempt logs its step 0.0001 s after rank 1 wrote its death.
    _process(tmp_path, 10, (990.0, 991.5, 992.0), world=2, attempt=0, steps=[999.99, DIED + 0.0001])
    _process(tmp_path, 11, (990.0, 991.4, 992.0), world=2, attempt=0, steps=[999.99])
    _process(
        tmp_path,
        20,
        (DIED + 0.7, DIED + 2.0, DIED + 2.4),
        world=2,
        attempt=1,
        steps=[DIED + 2.45, DIED + 2.5],
    )
    _process(tmp_path, 21, (DIED + 0.7, DIED + 2.1, DIED + 2.4), world=2, attempt=1, steps=[DIED + 2.46])

    parts = recovery(tmp_path, DIED, world=2, min_attempt=1)

    assert dataclasses.astuple(parts) == pytest.approx((0.7, 1.3, 0.4, 0.05))  # detect, start, group, step
    assert parts.total == pytest.approx(2.45)


def test_no_new_process_at_the_new_size_raises_naming_what_was_seen(tmp_path: Path) -> None:
    _process(tmp_path, 10, (990.0, 991.5, 992.0), world=2, attempt=0, steps=[DIED + 0.0001])
    with pytest.raises(RuntimeError, match="no process started after the death"):
        recovery(tmp_path, DIED, world=2, min_attempt=1)


def test_a_time_shorter_than_importing_torch_raises() -> None:
    procs = {"10": [990.0, 991.5, 992.0, 2, 0], "20": [1000.7, 1002.0, 1002.4, 2, 1]}
    with pytest.raises(RuntimeError, match="faster than any process of the run took to import"):
        check_possible(0.0001, procs)
    check_possible(2.45, procs)


def test_the_configured_waits_use_torchs_defaults_for_what_the_conf_leaves_out() -> None:
    assert configured_waits("last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3") == 4.0
    assert configured_waits("last_call_timeout=1") == 16.0
    assert configured_waits("") == 45.0
