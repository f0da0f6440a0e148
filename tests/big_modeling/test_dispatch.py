from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from accelerate import (
    cpu_offload,
    cpu_offload_with_hook,
    disk_offload,
    dispatch_model,
    init_empty_weights,
    load_checkpoint_and_dispatch,
)
from accelerate.hooks import remove_hook_from_submodules
from accelerate.utils import compute_module_sizes
from tests.big_modeling.tiny_models import TiedLM, reference

ROOT = Path(__file__).resolve().parents[2]


def _save(model: nn.Module, folder: Path) -> None:
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "head.weight"}
    save_file(state, str(folder / "model.safetensors"))


def _ids() -> torch.Tensor:
    return torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))


def test_auto_map_with_cpu_and_disk_gives_identical_outputs(tmp_path: Path) -> None:
    ref = reference()
    _save(ref, tmp_path)
    with init_empty_weights():
        model = TiedLM()
    budget = compute_module_sizes(model)[""] // 2
    model = load_checkpoint_and_dispatch(
        model, tmp_path, device_map="auto", max_memory={"cpu": budget, "disk": "1GB"},
        no_split_module_classes=["Block"], offload_folder=tmp_path / "offload",
    )  # fmt: skip
    assert set(model.hf_device_map.values()) == {"cpu", "disk"}
    assert model.head.weight is model.embed.weight  # still tied after loading and dispatch
    with torch.no_grad():
        assert torch.equal(model(_ids()), ref(_ids()))
        assert torch.equal(model(_ids()), ref(_ids()))  # weights released and reloaded
    offloaded = [name for name, device in model.hf_device_map.items() if device == "disk"]
    assert all(p.device.type == "meta" for p in model.get_submodule(offloaded[0]).parameters())


@pytest.mark.parametrize("mode", ["auto", "balanced", "balanced_low_0", "sequential"])
def test_string_device_maps(tmp_path: Path, mode: str) -> None:
    ref = reference()
    _save(ref, tmp_path)
    with init_empty_weights():
        model = TiedLM()
    model = load_checkpoint_and_dispatch(model, tmp_path, device_map=mode)
    with torch.no_grad():
        assert torch.equal(model(_ids()), ref(_ids()))


def test_peak_memory_stays_near_the_cpu_budget(tmp_path: Path) -> None:
    dim, layers = 256, 12
    torch.manual_seed(0)
    ref = TiedLM(dim=dim, layers=layers, vocab=64).eval()
    ids = torch.randint(0, 64, (1, 4))
    torch.save(ids, tmp_path / "ids.pt")
    with torch.no_grad():
        torch.save(ref(ids), tmp_path / "logits.pt")
    _save(ref, tmp_path)
    sizes = compute_module_sizes(ref)
    budget = sizes[""] // 3
    del ref
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.big_modeling.peak_memory_run", str(tmp_path), str(dim), str(layers), str(budget)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["equal"], report
    assert report["devices"] == ["cpu", "disk"] and report["tied_together"]
    # The whole model is never in memory: what the CPU holds plus a few blocks in flight.
    assert report["peak_gain"] < report["model"] + 3 * report["block"], report
    assert report["peak_gain"] < budget + 4 * report["block"], report


def test_dispatch_errors_name_the_problem(tmp_path: Path) -> None:
    model = reference()
    with pytest.raises(
        ValueError, match=r"37 parameter\(s\)/buffer\(s\) without a device: scale, blocks\.0\.norm\.weight"
    ):
        dispatch_model(model, {"embed": "cpu", "head": "cpu"})
    with pytest.raises(ValueError, match="offload_dir"):
        dispatch_model(model, {"": "cpu", "blocks": "disk"})


def test_dispatch_warns_about_names_the_model_lacks() -> None:
    # Upstream dispatches and ignores them; we dispatch too, with a warning naming them.
    model = reference()
    with torch.no_grad():
        expected = model(_ids())
    with pytest.warns(UserWarning, match="'decoder'"):
        dispatch_model(
            model, {"embed": "cpu", "decoder": "cpu", "blocks": "cpu", "head": "cpu", "scale": "cpu"}
        )
    with torch.no_grad():
        assert torch.equal(model(_ids()), expected)


def _torch_error(device: str | int) -> type[BaseException]:
    """What torch itself raises on this machine for a tensor on ``device`` (its type depends on the build)."""
    try:
        torch.empty(0, device=device)
    except Exception as exc:
        return type(exc)
    raise AssertionError(f"{device} exists here")


@pytest.mark.skipif(torch.cuda.device_count() > 3, reason="needs a machine without GPU 3")
@pytest.mark.parametrize("device", [3, "cuda:3"])
def test_dispatch_onto_a_gpu_this_machine_lacks_raises_what_torch_raises(device: str | int) -> None:
    # Upstream fails where it moves the weights, with torch's own error; ours fails before moving
    # anything, with the same exception type and a message naming the blocks and the device.
    model = reference()
    expected = _torch_error(device)
    for device_map in ({"": device}, {"embed": device, "blocks": "cpu", "head": device, "scale": device}):
        with pytest.raises(expected, match="which this machine does not have") as raised:
            dispatch_model(model, device_map)
        on_gpu = [name for name, placed in device_map.items() if placed == device]
        assert f"{on_gpu} on {device!r}" in str(raised.value)
        assert model.embed.weight.device.type == "cpu" and not hasattr(model, "_hf_hook")


def test_dispatch_with_disk_writes_the_offload_folder(tmp_path: Path) -> None:
    model = reference()
    with torch.no_grad():
        expected = model(_ids())
    device_map = {"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks.0": "cpu", "blocks": "disk"}
    dispatch_model(model, device_map, offload_dir=tmp_path)
    assert (tmp_path / "index.json").is_file() and (tmp_path / "blocks.3.up.weight.dat").is_file()
    with torch.no_grad():
        assert torch.equal(model(_ids()), expected)
    remove_hook_from_submodules(model)


def test_single_device_map_without_hooks() -> None:
    model = reference()
    dispatch_model(model, {"": "cpu"})
    assert not hasattr(model, "_hf_hook") and model.hf_device_map == {"": "cpu"}
    dispatch_model(model, {"": "cpu"}, force_hooks=True)
    assert hasattr(model, "_hf_hook")


def test_cpu_offload_and_disk_offload(tmp_path: Path) -> None:
    model = reference()
    with torch.no_grad():
        expected = model(_ids())
    cpu_offload(model, execution_device="cpu")
    assert model.blocks[0].up.weight.device.type == "meta"
    with torch.no_grad():
        assert torch.equal(model(_ids()), expected)
    other = reference()
    disk_offload(other, tmp_path, execution_device="cpu")
    assert (tmp_path / "index.json").is_file()
    with torch.no_grad():
        assert torch.equal(other(_ids()), expected)


def test_preload_module_classes_loads_a_block_at_once(tmp_path: Path) -> None:
    model = reference()
    with torch.no_grad():
        expected = model(_ids())
    cpu_offload(model, execution_device="cpu", preload_module_classes=["Block"])
    assert hasattr(model.blocks[0], "_hf_hook") and not hasattr(model.blocks[0].up, "_hf_hook")
    with torch.no_grad():
        assert torch.equal(model(_ids()), expected)


def test_cpu_offload_with_hook_chains_models() -> None:
    first, second = nn.Linear(3, 3), nn.Linear(3, 2)
    x = torch.randn(4, 3)
    expected = second(first(x))
    seen: list[str] = []
    first, hook1 = cpu_offload_with_hook(first, execution_device="cpu")
    second, hook2 = cpu_offload_with_hook(second, execution_device="cpu", prev_module_hook=hook1)
    original = hook1.offload

    def tracking_offload() -> None:
        seen.append("first offloaded")
        original()

    hook1.offload = tracking_offload  # type: ignore[method-assign]  # observe the real hook's call
    assert torch.equal(second(first(x)), expected)
    assert seen == ["first offloaded"]  # running the second model sent the first back
    hook2.offload()
    hook2.remove()
    assert not hasattr(second, "_hf_hook") and torch.equal(second(first(x)), expected)


class _RootParam(nn.Module):
    """Tensors of the root module itself (like a ViT's position embedding) next to offloaded blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(16, 16) for _ in range(4)])
        self.register_buffer("shift", torch.ones(16))
        self.pos = nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.pos + self.shift
        for block in self.blocks:
            x = block(x)
        return x


def test_root_tensors_stay_on_the_execution_device(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ref = _RootParam()
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(tmp_path / "model.safetensors"))
    x = torch.randn(3, 16)
    with init_empty_weights():
        model = _RootParam()
    budget = compute_module_sizes(model)["blocks.0"] * 3
    model = load_checkpoint_and_dispatch(
        model,
        tmp_path,
        device_map="auto",
        max_memory={"cpu": budget, "disk": "1GB"},
        offload_folder=tmp_path / "off",
    )
    assert model.hf_device_map["pos"] == "cpu" and "disk" in model.hf_device_map.values()
    with torch.no_grad():
        assert torch.equal(model(x), ref(x))
