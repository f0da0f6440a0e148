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


def test_a_dry_run_with_ep_checks_the_expert_mesh_of_64_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    code = main(["launch", "--dry_run", "--check_plan", "--cpu", "--use_parallelism_config",
                 "--parallelism_config_dp_replicate_size", "4", "--parallelism_config_dp_shard_size", "16",
                 "--parallelism_config_ep_size", "8", "--num_processes", "64", str(script)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Plan check: dp_replicate=4 x dp_shard=16 (ep=8) on 64 ranks" in out and "no problems found" in out


LAUNCH_1024 = ["launch", "--dry_run", "--check_plan", "--cpu", "--use_parallelism_config",
               "--parallelism_config_dp_replicate_size", "8", "--parallelism_config_dp_shard_size", "16",
               "--parallelism_config_tp_size", "8", "--num_processes", "1024", "--num_machines", "128",
               "--machine_rank", "0", "--main_process_ip", "10.0.0.1", "--main_process_port", "29500"]  # fmt: skip


def test_reshard_to_prints_what_each_rank_of_the_other_layout_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    code = main([*LAUNCH_1024, "--reshard_to", "dp_replicate=8,dp_shard=8,tp=8", str(script)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        "reshard 1024 -> 512 ranks (dp_replicate=8 x dp_shard=8 x tp=8): each reads at most 2 saved shards"
        in out
    )
    assert (
        "new rank 7 (dp_replicate 0, dp_shard 0, tp 7): rows 0-256 of saved shard 0 (old ranks 7,135,263,391,... (8)); "
        "rows 256-512 of saved shard 1 (old ranks 15,143,271,399,... (8))" in out
    )
    assert "... and 504 more ranks" in out


def test_reshard_to_needs_check_plan_and_a_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    assert main(["launch", "--dry_run", "--cpu", "--reshard_to", "dp_shard=2", str(script)]) == 2
    assert "--reshard_to needs --check_plan" in capsys.readouterr().err
    assert main([*LAUNCH_1024, "--reshard_to", "dp_shard=four", str(script)]) == 2
    assert "'dp_shard=four' is not DIM=SIZE" in capsys.readouterr().err
    assert main([*LAUNCH_1024, "--reshard_to", "dp_shard=32,tp=4", str(script)]) == 2
    assert "tp changes from 8 to 4" in capsys.readouterr().err


def test_a_1024_rank_pipeline_layout_is_checked_from_the_launch_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    argv = [*LAUNCH_1024, "--parallelism_config_dp_shard_size", "8", "--parallelism_config_pp_size", "2",
            "--reshard_to", "dp_replicate=8,dp_shard=4,pp=2,tp=8", str(script)]  # fmt: skip
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        "Plan check: dp_replicate=8 x dp_shard=8 x pp=2 x tp=8 on 1024 ranks" in out
        and "no problems found" in out
    )
    assert "new rank 0 (dp_replicate 0, dp_shard 0, pp 0, tp 0): rows 0-512 of saved shard 0" in out
