"""An elastic group that re-forms at a world size its checkpoint cannot be resharded to stops.

The checkpoint is saved mid-epoch by one process training on a stream (an iterable dataset, whose
position cannot be re-split over another number of processes); the elastic launch (``--nnodes 1:2``)
then forms a group of two processes on this one "node". ``load_state`` refuses the checkpoint,
naming the loader's file and both world sizes, before any object changes; the launch exits non-zero
with the message, and no process trained a step after the refused load.

With ``--max_restarts N`` torch's agent first restarts the group N times (each attempt fails the
same way in ``load_state``, before its first step; a restart cannot be refused without torch's
private agent internals), then stops the same way; N is 0 here to keep the test short.
"""

from __future__ import annotations

from pathlib import Path

from tests.commands.helpers import reserved_port, run_cli
from tests.launch.scripts import elastic_refusal

SCRIPT = elastic_refusal.__file__


def test_a_checkpoint_that_cannot_reshard_stops_the_elastic_job(tmp_path: Path) -> None:
    project, log = tmp_path / "project", tmp_path / "log.txt"
    # The checkpoint: saved by one process (this one; the script's own code, without a launcher).
    elastic_refusal.main([str(project), str(log), "--save_at", "3"])
    with reserved_port() as port:
        result = run_cli(
            "launch", "--cpu", "--num_processes", "4", "--nnodes", "1:2", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_conf", "last_call_timeout=1",
            "--max_restarts", "0", "--monitor_interval", "0.2", SCRIPT, str(project), str(log),
            home=tmp_path, timeout=120,
        )  # fmt: skip
    assert result.returncode != 0, result.stdout + result.stderr
    err = result.stderr
    assert "dl_state_dict.bin does not fit dataloader 0" in err, err
    assert "saved by 1 process, loading on 2" in err
    assert "with 1 process, but this run has 2 processes" in err
    lines = log.read_text().splitlines()
    # The first run's three steps, then two processes that each stopped in the load.
    assert lines[:4] == ["start world 1", "step 1 world 1", "step 2 world 1", "step 3 world 1"]
    assert lines[4:] == ["start world 2"] * 2, lines
