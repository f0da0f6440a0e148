"""save_state / load_state pre-hooks get the bare models (upstream), not the DDP wrappers around them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

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
