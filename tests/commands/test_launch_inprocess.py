"""`accelerate launch` argument handling through main() in this process (no processes started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelerate.commands.accelerate_cli import main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    for name in (
        "ACCELERATE_CONFIG_FILE",
        "ACCELERATE_MIXED_PRECISION",
        "ACCELERATE_USE_CPU",
        "ACCELERATE_DEBUG_MODE",
    ):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_dry_run_shows_each_source(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = home / "accelerate" / "default_config.yaml"
    config.parent.mkdir()
    config.write_text("num_processes: 2\nuse_cpu: true\nmixed_precision: fp16\ndebug: true\n")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert (
        main(["launch", "--dry_run", "--gradient_accumulation_steps", "4", "train.py", "--epochs", "1"]) == 0
    )
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith(" ")}
    assert rows["num_processes"].split()[1:] == ["2", "config", "file", str(config)]
    assert rows["mixed_precision"].endswith("environment ACCELERATE_MIXED_PRECISION")
    assert rows["gradient_accumulation_steps"].endswith("flag --gradient_accumulation_steps")
    assert rows["max_restarts"].endswith("default")
    assert f"Config file: {config} (default location)" in out
    assert "ACCELERATE_GRADIENT_ACCUMULATION_STEPS=4" in out
    assert "--module accelerate.launch.bootstrap train.py --epochs 1" in out


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--cpu", "--multi_gpu"], ["--cpu", "--multi_gpu"]),
        (["--main_process_port", "29555"], ["--main_process_port", "num_processes=1"]),
        (["--num_processes", "3", "--num_machines", "2"], ["num_processes=3", "num_machines=2"]),
        (
            ["--use_fsdp", "--fsdp_version", "2", "--fsdp_sharding_strategy", "FULL_SHARD"],
            ["fsdp_reshard_after_forward"],
        ),
        (["--config_file", "/nonexistent.yaml"], ["--config_file /nonexistent.yaml"]),
    ],
)
def test_bad_requests_are_errors(
    home: Path, capsys: pytest.CaptureFixture[str], args: list[str], needles: list[str]
) -> None:
    assert main(["launch", *args, "train.py"]) == 2
    err = capsys.readouterr().err
    assert all(n in err for n in needles), err


def test_unknown_keys_in_the_config_are_named(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = home / "bad.yaml"
    bad.write_text("num_processes: 1\nnum_proceses: 2\n")
    assert main(["launch", "--config_file", str(bad), "train.py"]) == 2
    assert "'num_proceses'" in capsys.readouterr().err


def test_dashed_flag_spelling(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--dry-run", "--num-processes", "2", "--cpu", "t.py"]) == 0
    assert "--nproc_per_node 2" in capsys.readouterr().out
