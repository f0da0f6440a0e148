"""`accelerate launch --debug`: a process that never reaches a collective ends the run, not a hang (issue 17)."""

from __future__ import annotations

from pathlib import Path

from tests.commands.helpers import reserved_port, run_cli

# Process 2 skips the gather (as under `if accelerator.is_main_process:` on the others' side) and
# its script ends; without debug mode processes 0 and 1 would wait in gloo for the group's timeout.
# The debug timeout (1 s) is what processes 0 and 1 wait out; the three processes leave PartialState()
# within 2 ms of each other at load 7 (measured), so collective #1 stays far inside it.
_SKIPS_A_GATHER = """
import torch
from accelerate import PartialState
from accelerate.utils import gather

state = PartialState()
state.wait_for_everyone()  # collective #1: every process
if state.process_index != 2:
    gather(torch.ones(1))
"""


def test_debug_mode_raises_on_every_waiting_rank_naming_the_operation_and_the_missing_rank(
    tmp_path: Path,
) -> None:
    script = tmp_path / "skip.py"
    script.write_text(_SKIPS_A_GATHER)
    with reserved_port() as port:
        result = run_cli("launch", "--cpu", "--num_processes", "3", "--debug", "--main_process_port", str(port),
                         str(script), home=tmp_path, timeout=200, ACCELERATE_DEBUG_TIMEOUT="1")  # fmt: skip
    assert result.returncode == 1, result.stderr
    for rank in (0, 1):  # each waiting process raised on its own, naming the call and who is missing
        assert (
            f"DistributedOperationException: `gather` (collective #2 of process {rank}) cannot start: "
            "process(es) 2 did not reach it within 1 s (waiting: 0, 1)." in result.stderr
        ), result.stderr
    assert "process 2: its last collective through accelerate was #1 `wait_for_everyone`" in result.stderr
    assert "failed with exit code 1 (the first to fail)" in result.stderr
