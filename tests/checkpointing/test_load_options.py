"""The keyword arguments upstream's users pass to save_state / load_state on a plain (non-DeepSpeed) run:
``map_location`` and ``load_kwargs`` for loading, DeepSpeed-only options for saving."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from accelerate import Accelerator


def _trained(accelerator: Accelerator) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.randn(4, 3)).sum())
    optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("map_location", [None, "cpu", "on_device"])
def test_load_state_takes_upstreams_map_locations(tmp_path: Path, map_location: str | None) -> None:
    accelerator = Accelerator(cpu=True)
    model, optimizer = _trained(accelerator)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    accelerator.save_state(str(tmp_path / "ckpt"))
    with torch.no_grad():
        for param in model.parameters():
            param.add_(1.0)
    accelerator.load_state(str(tmp_path / "ckpt"), map_location=map_location)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())
    assert optimizer.state_dict()["state"][0]["exp_avg"].device == model.weight.device


def test_an_unknown_map_location_is_refused_before_anything_loads(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model, _ = _trained(accelerator)
    accelerator.save_state(str(tmp_path / "ckpt"))
    with torch.no_grad():
        model.weight.fill_(5.0)
    with pytest.raises(TypeError, match="Unsupported optimizer map location passed"):
        accelerator.load_state(str(tmp_path / "ckpt"), map_location="invalid")
    assert torch.all(model.weight == 5.0)


def test_load_kwargs_is_the_second_positional_argument(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model, _ = _trained(accelerator)
    accelerator.save_state(str(tmp_path / "ckpt"))
    accelerator.load_state(str(tmp_path / "ckpt"), {"weights_only": True})  # upstream's order
    accelerator.load_state(str(tmp_path / "ckpt"), load_kwargs={"weights_only": True}, strict=False)


def test_save_state_ignores_deepspeed_only_options_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Upstream hands these to DeepSpeed's save_checkpoint and ignores them elsewhere: a script
    # written for DeepSpeed still saves when run without it.
    accelerator = Accelerator(cpu=True)
    _trained(accelerator)
    with caplog.at_level(logging.WARNING):
        path = accelerator.save_state(str(tmp_path / "ckpt"), exclude_frozen_parameters=True)
    assert Path(path).is_dir()
    assert "exclude_frozen_parameters" in caplog.text
    accelerator.load_state(path)
