from __future__ import annotations

from pathlib import Path

import pytest

from accelerate.commands.accelerate_cli import main


def test_estimate_memory_from_a_local_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
    )
    config.save_pretrained(tmp_path)
    assert main(["estimate-memory", str(tmp_path), "--dtypes", "float32", "int4"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "Memory usage for loading" in lines[0] and "Training using Adam" in lines[1]
    fp32, int4 = lines[3].split(), lines[4].split()
    # Embedding 1000 x 64 floats is the largest layer: 256,000 bytes = 250 KB; int4 is an eighth.
    assert fp32[:3] == ["float32", "250.00", "KB"] and int4[:3] == ["int4", "31.25", "KB"]
    assert int4[-1] == "N/A"


def test_estimate_memory_default_dtypes_include_bfloat16(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
    )
    config.save_pretrained(tmp_path)
    assert main(["estimate-memory", str(tmp_path)]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[3:]}
    assert list(rows) == ["float32", "float16", "bfloat16", "int8", "int4"]
    assert rows["bfloat16"] == rows["float16"]  # same size, same mixed-precision training estimate
    assert main(["estimate-memory", str(tmp_path / "config.json"), "--dtypes", "float32"]) == 0  # the file itself
    assert capsys.readouterr().out.splitlines()[3].split()[1:] == rows["float32"]


def test_estimate_memory_unknown_library(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate-memory", "someone/some-model"]) == 2
    assert "--library_name" in capsys.readouterr().err
