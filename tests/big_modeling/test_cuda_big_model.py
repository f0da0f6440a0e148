"""Big-model loading between a CUDA GPU and the host: dispatch_model, cpu_offload, disk_offload and
load_checkpoint_and_dispatch, each checked against the plain model's output on the CPU.

Marked ``cuda``: skipped without a GPU (conftest); ``make gpu-check`` runs them on a lent GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from accelerate import (
    cpu_offload,
    disk_offload,
    dispatch_model,
    init_empty_weights,
    load_checkpoint_and_dispatch,
)
from tests.big_modeling.tiny_models import TiedLM, reference

pytestmark = pytest.mark.cuda

GPU: int | str = 0  # the execution device (a module constant so the file reads as the device map does)
# Embedding and tied head on the GPU, two blocks kept on the host, two on disk.
MIXED_MAP: dict[str, int | str] = {
    "embed": GPU, "blocks.0": GPU, "blocks.1": GPU, "blocks.2": "cpu", "blocks.3": "cpu",
    "blocks.4": "disk", "blocks.5": "disk", "head": GPU, "scale": GPU,
}  # fmt: skip


def _ids() -> torch.Tensor:
    return torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))


def _expected() -> torch.Tensor:
    with torch.no_grad():
        return reference()(_ids())


def _check(model: nn.Module, expected: torch.Tensor, device: str = "cpu") -> None:
    for _ in range(2):  # the second forward reloads what the first released
        with torch.no_grad():
            out = model(_ids().to(device))
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-5)


def _save(folder: Path) -> None:
    state = {k: v.contiguous() for k, v in reference().state_dict().items() if k != "head.weight"}
    save_file(state, str(folder / "model.safetensors"))


def test_dispatch_model_across_gpu_host_and_disk(tmp_path: Path) -> None:
    expected = _expected()
    model = dispatch_model(reference(), device_map=MIXED_MAP, offload_dir=tmp_path / "offload")
    assert model.hf_device_map == MIXED_MAP
    assert model.embed.weight.device == torch.device("cuda", 0)
    assert model.head.weight is model.embed.weight
    _check(model, expected)


def test_cpu_offload_executes_on_the_gpu() -> None:
    expected = _expected()
    model = cpu_offload(reference(), execution_device=GPU)
    devices: list[torch.device] = []
    model.blocks[0].up.register_forward_hook(lambda _m, _i, out: devices.append(out.device))
    _check(model, expected)
    assert devices and all(d.type == "cuda" for d in devices)
    assert model.blocks[0].up.weight.device.type != "cuda"  # weights go back to the host after forward


def test_disk_offload_executes_on_the_gpu(tmp_path: Path) -> None:
    expected = _expected()
    model = disk_offload(reference(), tmp_path / "offload", execution_device=GPU)
    assert (tmp_path / "offload" / "index.json").is_file()
    _check(model, expected)


def test_load_checkpoint_and_dispatch_auto_puts_a_small_model_on_the_gpu(tmp_path: Path) -> None:
    _save(tmp_path)
    with init_empty_weights():
        model = TiedLM()
    model = load_checkpoint_and_dispatch(
        model, tmp_path, device_map="auto", no_split_module_classes=["Block"]
    )
    assert set(model.hf_device_map.values()) == {GPU}
    assert all(p.device == torch.device("cuda", 0) for p in model.parameters())
    assert model.head.weight is model.embed.weight
    # One device: the model is moved there without hooks (as upstream), so inputs go there too.
    _check(model, _expected(), device=GPU if isinstance(GPU, str) else f"cuda:{GPU}")


def test_load_checkpoint_and_dispatch_with_a_mixed_map(tmp_path: Path) -> None:
    _save(tmp_path)
    with init_empty_weights():
        model = TiedLM()
    model = load_checkpoint_and_dispatch(
        model, tmp_path, device_map=MIXED_MAP, offload_folder=tmp_path / "off"
    )
    assert set(model.hf_device_map.values()) == {GPU, "cpu", "disk"}
    assert model.head.weight is model.embed.weight
    _check(model, _expected())
