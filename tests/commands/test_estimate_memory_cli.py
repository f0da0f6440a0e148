from __future__ import annotations

from pathlib import Path

import pytest

from accelerate.commands.accelerate_cli import main


def _save_small_llama(path: Path, **extra: object) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        **extra,
    )
    config.save_pretrained(path)


def _rows(out: str) -> dict[str, list[str]]:
    """dtype -> its cells, from the boxed table."""
    lines = [line.strip("│").split("│") for line in out.splitlines() if line.startswith("│")]
    return {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in lines if len(cells) == 4}


def test_estimate_memory_from_a_local_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _save_small_llama(tmp_path)
    assert main(["estimate-memory", str(tmp_path), "--dtypes", "float32", "int4"]) == 0
    out = capsys.readouterr().out
    assert f"Memory Usage for loading `{tmp_path}`" in out
    rows = _rows(out)
    assert rows["dtype"] == ["Largest Layer", "Total Size", "Training using Adam"]
    # Embedding 1000 x 64 floats is the largest layer: 256,000 bytes = 250 KB; int4 is an eighth.
    assert rows["float32"][0] == "250.0 KB" and rows["int4"][0] == "31.25 KB"
    assert rows["int4"][2] == "N/A"


def test_estimate_memory_default_dtypes_are_upstreams_and_bfloat16_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _save_small_llama(tmp_path, torch_dtype="bfloat16")  # the config's dtype does not shrink the estimate
    assert main(["estimate-memory", str(tmp_path)]) == 0
    rows = _rows(capsys.readouterr().out)
    assert [name for name in rows if name != "dtype"] == ["float32", "float16", "int8", "int4"]
    assert rows["float32"][0] == "250.0 KB"
    assert main(["estimate-memory", str(tmp_path / "config.json"), "--dtypes", "bfloat16", "float16"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["bfloat16"] == rows["float16"]  # same size, same mixed-precision training estimate


def test_estimate_memory_unknown_library(capsys: pytest.CaptureFixture[str]) -> None:
    # No network here: the Hub cannot say which library the model is; the error says what to pass.
    assert main(["estimate-memory", "someone/some-model"]) == 2
    assert "--library_name" in capsys.readouterr().err
