from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from accelerate import init_empty_weights, load_checkpoint_and_dispatch
from accelerate.big_modeling import infer_auto_device_map, init_on_device


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))


def test_init_empty_weights_puts_parameters_on_meta() -> None:
    with init_empty_weights():
        model = _model()
    assert all(p.device.type == "meta" for p in model.parameters())
    assert all(b.device.type == "cpu" for b in model.buffers())  # buffers stay unless asked
    with init_empty_weights(include_buffers=True):
        model = _model()
    assert all(b.device.type == "meta" for b in model.buffers())
    assert isinstance(model[0].weight, torch.nn.Parameter) and model[0].weight.requires_grad


def test_init_on_device_restores_module_registration() -> None:
    with init_on_device("meta"):
        pass
    assert torch.nn.Linear(2, 2).weight.device.type == "cpu"


def test_load_checkpoint_and_dispatch_into_empty_model(tmp_path: Path) -> None:
    source = _model()
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    with init_empty_weights():
        model = _model()
    model = load_checkpoint_and_dispatch(model, str(path), device_map="auto")
    assert model.hf_device_map == {"": "cpu"}  # one device: entries merged (clean_result)
    for (name, a), b in zip(model.state_dict().items(), source.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    model.eval()
    source.eval()
    x = torch.randn(3, 4)
    assert torch.equal(model(x), source(x))


def test_auto_map_respects_max_memory() -> None:
    model = _model()
    device_map = infer_auto_device_map(model, max_memory={"cpu": "1KB"})
    assert set(device_map.values()) == {"cpu"}
    assert set(infer_auto_device_map(model, max_memory={"cpu": 10}).values()) == {"disk"}
    with pytest.raises(ValueError, match="does not fit on any device"):
        infer_auto_device_map(model, max_memory={"cpu": 10, "disk": 0})


def test_unknown_device_map_string_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="balanced_low_0"):
        load_checkpoint_and_dispatch(_model(), str(tmp_path), device_map="fastest")


def test_include_buffers_none_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with init_empty_weights():
        model = _model()
    assert model[1].running_mean.device.type == "cpu"
    monkeypatch.setenv("ACCELERATE_INIT_INCLUDE_BUFFERS", "1")
    with init_empty_weights():
        model = _model()
    assert model[1].running_mean.device.type == "meta"
    with init_empty_weights(include_buffers=False):
        model = _model()
    assert model[1].running_mean.device.type == "cpu"
