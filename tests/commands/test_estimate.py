"""Upstream's functions of ``accelerate.commands.estimate``, driven as upstream's CLI tests drive them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from accelerate.commands import estimate
from accelerate.commands.estimate import (
    HubUnreachableError,
    check_has_model,
    create_ascii_table,
    create_empty_model,
    estimate_command,
    estimate_command_parser,
    estimate_training_usage,
    gather_data,
    verify_on_hub,
)


@pytest.fixture
def llama_dir(tmp_path: Path) -> Path:
    transformers = pytest.importorskip("transformers")
    transformers.LlamaConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4
    ).save_pretrained(tmp_path)
    return tmp_path


def test_parser_defaults_match_upstream() -> None:
    args = estimate_command_parser().parse_args(["some/model"])
    assert (args.model_name, args.library_name, args.trust_remote_code) == ("some/model", None, False)
    assert args.dtypes == ["float32", "float16", "int8", "int4"]


def test_gather_data_rows_per_dtype(llama_dir: Path) -> None:
    import torch

    args = estimate_command_parser().parse_args([str(llama_dir), "--dtypes", "float32", "float16", "int4"])
    output = gather_data(args)
    model = create_empty_model(str(llama_dir), library_name="transformers")
    assert all(p.device == torch.device("meta") and p.dtype == torch.float32 for p in model.parameters())
    total = sum(t.numel() * 4 for t in [*model.parameters(), *model.buffers()])
    largest = 1000 * 64 * 4
    assert [row[0] for row in output] == ["float32", "float16", "int4"]
    for row, factor in zip(output, [1, 2, 8], strict=True):
        assert row[1] == largest / factor and row[2] == total / factor
    assert max(output[0][3].values()) == total * 4  # Adam in float32: weights, grads, 2 states
    assert max(output[1][3].values()) == (total / 2) * 4
    assert set(output[2][3].values()) == {-1}


def test_estimate_command_prints_upstreams_table(llama_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    estimate_command(estimate_command_parser().parse_args([str(llama_dir), "--dtypes", "float32", "int8"]))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Loading pretrained config for")
    assert lines[1].startswith("┌") and f"Memory Usage for loading `{llama_dir}`" in lines[2]
    assert [cell.strip() for cell in lines[4].strip("│").split("│")] == [
        "dtype", "Largest Layer", "Total Size", "Training using Adam"
    ]  # fmt: skip
    assert lines[6].strip("│").split("│")[0].strip() == "float32" and lines[-1].startswith("└")
    assert lines[7].strip("│").split("│")[-1].strip() == "N/A"


def test_create_ascii_table_widens_for_a_long_title() -> None:
    table = create_ascii_table(["a", "b"], [["1", "22"]], "a long title")
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1  # a rectangle
    assert "a long title" in lines[1] and lines[3].strip("│").split("│")[0] == "a"


def test_estimate_training_usage() -> None:
    assert estimate_training_usage(1000, "float32") == {"model": 1000, "optimizer": 2000, "gradients": 1000,
                                                        "step": 4000}  # fmt: skip
    assert estimate_training_usage(1000, "float16") == {"model": 1000, "optimizer": 2000, "gradients": 1500,
                                                        "step": 2000}  # fmt: skip
    assert estimate_training_usage(1000, "fp8", msamp_config="O1") == dict.fromkeys(
        ["model", "optimizer", "gradients", "step"], -1
    )


def test_check_has_model() -> None:
    assert check_has_model(OSError("x does not appear to have a file named config.json")) == "transformers"
    assert check_has_model(ValueError("other")) == "unknown"


def _patch_hub(monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
    def fake(repo_id: str, token: str | None = None) -> Any:
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(estimate, "model_info", fake)


def test_hub_unreachable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class ConnectError(Exception):  # the transport's error (httpx's is no OSError)
        pass

    _patch_hub(monkeypatch, ConnectError("Name or service not known"))
    args = estimate_command_parser().parse_args(["somebrokenname"])
    with pytest.raises(HubUnreachableError, match="could not be reached.*local folder"):
        estimate_command(args)
    _patch_hub(monkeypatch, ConnectionError("refused"))
    with pytest.raises(HubUnreachableError):
        verify_on_hub("somebrokenname")


def test_no_library_metadata_and_unsupported_library(monkeypatch: pytest.MonkeyPatch) -> None:
    _patch_hub(monkeypatch, SimpleNamespace(library_name=None, config=None))
    with pytest.raises(ValueError, match="does not have any library metadata"):
        estimate_command(estimate_command_parser().parse_args(["muellerzr/dummy"]))
    assert verify_on_hub("muellerzr/dummy").library_name is None
    with pytest.raises(ValueError, match="not supported yet"):
        create_empty_model("muellerzr/dummy", library_name="diffusers")


def test_unknown_and_gated_repositories_raise_the_hubs_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    errors = pytest.importorskip("huggingface_hub.errors")
    httpx = pytest.importorskip("httpx2")  # this huggingface_hub builds its errors from an httpx response
    response = httpx.Response(404, request=httpx.Request("GET", "https://huggingface.co/api/models/x"))
    _patch_hub(monkeypatch, errors.RepositoryNotFoundError("404", response=response))
    assert verify_on_hub("somebrokenname") == "repo"
    with pytest.raises(errors.RepositoryNotFoundError, match="does not exist on the Hub"):
        estimate_command(estimate_command_parser().parse_args(["somebrokenname"]))
    _patch_hub(monkeypatch, errors.GatedRepoError("401", response=response))
    assert verify_on_hub("meta-llama/Llama-2-7b-hf") == "gated"
    with pytest.raises(errors.GatedRepoError, match="is gated"):
        create_empty_model("meta-llama/Llama-2-7b-hf", library_name=None)
