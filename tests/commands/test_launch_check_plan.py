"""``accelerate launch --dry_run --check_plan``: the plan checker over the launch's sizes, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelerate.commands.accelerate_cli import main


def test_a_dry_run_checks_a_64_rank_layout_in_this_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    code = main(["launch", "--dry_run", "--check_plan", "--cpu", "--use_parallelism_config",
                 "--parallelism_config_dp_replicate_size", "2", "--parallelism_config_dp_shard_size", "4",
                 "--parallelism_config_tp_size", "8", "--num_processes", "64", "--num_machines", "8",
                 "--machine_rank", "0", "--main_process_ip", "10.0.0.1", "--main_process_port", "29500",
                 str(script)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Plan check: dp_replicate=2 x dp_shard=4 x tp=8 on 64 ranks" in out and "no problems found" in out
