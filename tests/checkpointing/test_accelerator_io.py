"""The Accelerator's checkpoint methods: save_state / load_state pre-hooks get the bare models (upstream),
not the DDP wrappers around them; save_model of an offloaded model writes its real weights."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.helpers.pool import WorkerPool


class Pretrained(torch.nn.Linear):
    """A model with diffusers' ``save_pretrained``, which a DDP wrapper does not forward."""

    def save_pretrained(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "keys.json"), "w") as f:
            json.dump(sorted(self.state_dict()), f)


def _hooks_see_bare_models(folder: str) -> dict[str, Any]:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(Pretrained(2, 2))
    seen: dict[str, Any] = {"prepared": type(model).__name__}

    def save_hook(models: list[torch.nn.Module], weights: list[dict[str, Any]], output_dir: str) -> None:
        seen["saved"] = [type(m).__name__ for m in models]
        seen["weight_keys"] = [sorted(w) for w in weights]
        if accelerator.is_main_process:
            for m in models:
                m.save_pretrained(os.path.join(output_dir, "model"))  # diffusers' standard hook

    def load_hook(models: list[torch.nn.Module], input_dir: str) -> None:
        seen["loaded"] = [type(m).__name__ for m in models]

    accelerator.register_save_state_pre_hook(save_hook)
    accelerator.register_load_state_pre_hook(load_hook)
    accelerator.save_state(folder)
    accelerator.load_state(folder)
    return seen


def test_pre_hooks_get_bare_models_in_two_processes(pool2: WorkerPool, tmp_path: Path) -> None:
    folder = str(tmp_path / "ckpt")
    for seen in pool2.run(_hooks_see_bare_models, folder):
        assert seen["prepared"] == "DistributedDataParallel"
        assert seen["saved"] == ["Pretrained"] and seen["loaded"] == ["Pretrained"]
        assert seen["weight_keys"] == [["bias", "weight"]]
    assert json.loads((tmp_path / "ckpt" / "model" / "keys.json").read_text()) == ["bias", "weight"]


def _offload_by_dispatch(model: torch.nn.Module, folder: Path) -> None:
    from accelerate import dispatch_model

    dispatch_model(model, {"0": "cpu", "1": "disk", "2": "disk"}, offload_dir=folder)


def _offload_by_disk_offload(model: torch.nn.Module, folder: Path) -> None:
    from accelerate import disk_offload

    disk_offload(model, folder, execution_device="cpu")


def _offload_by_cpu_offload(model: torch.nn.Module, folder: Path) -> None:
    from accelerate import cpu_offload

    cpu_offload(model, execution_device="cpu")


@pytest.mark.parametrize("offload", [_offload_by_dispatch, _offload_by_disk_offload, _offload_by_cpu_offload])
def test_save_model_of_an_offloaded_model_writes_the_real_weights(
    tmp_path: Path, offload: Callable[[torch.nn.Module, Path], None]
) -> None:
    # Upstream: save_model loads each offloaded block from its hook (the disk or the CPU copy) and
    # saves its real values, not the meta placeholders the model holds between forwards.
    from safetensors.torch import load_file

    from accelerate import Accelerator

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    expected = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    offload(model, tmp_path / "offload")
    assert any(p.is_meta for p in model.parameters())  # the premise: weights live outside the model
    Accelerator(cpu=True).save_model(model, str(tmp_path / "saved"))
    saved = load_file(tmp_path / "saved" / "model.safetensors")
    assert sorted(saved) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(saved[name], tensor), name
    assert any(p.is_meta for p in model.parameters())  # still offloaded afterwards


def test_register_for_checkpointing_lists_every_invalid_object_as_upstream() -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError) as error:
        accelerator.register_for_checkpointing(torch.tensor([1]), torch.tensor([2]), model, optimizer)
    message = str(error.value)
    assert message.startswith("All `objects` must include a `state_dict` and `load_state_dict` function")
    assert "Item at index 0, `Tensor`" in message and "Item at index 1" in message
    assert "Item at index 2" not in message and "Item at index 3" not in message
    accelerator.register_for_checkpointing(model, optimizer)  # nothing was registered by the failed call
    assert accelerator._custom_objects == [model, optimizer]
