"""dispatch_model / load_checkpoint_and_dispatch options and the lower-level attach helpers."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from accelerate import dispatch_model, init_empty_weights, load_checkpoint_and_dispatch
from accelerate.hooks import (
    AlignDevicesHook,
    CpuOffload,
    SequentialHook,
    add_hook_to_module,
    attach_align_device_hook_on_blocks,
    attach_execution_device_hook,
    remove_hook_from_module,
    remove_hook_from_submodules,
)
from accelerate.utils import compute_module_sizes, offload_state_dict
from accelerate.utils.modeling import check_tied_parameters_on_same_device, load_offloaded_weights
from tests.big_modeling.tiny_models import TiedLM, reference
from tests.helpers.pool import WorkerPool


def _ids() -> torch.Tensor:
    return torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))


def _save(model: nn.Module, folder: Path) -> Path:
    path = folder / "model.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "head.weight"}, str(path))
    return path


def test_offload_index_reads_disk_blocks_from_a_safetensors_file(tmp_path: Path) -> None:
    ref = reference()
    path = _save(ref, tmp_path)
    with torch.no_grad():
        expected = ref(_ids())
    model = reference()
    with torch.no_grad():
        for param in model.blocks.parameters():
            param.zero_()  # the blocks' weights must come from the file, not from the model
    index = {
        name: {"safetensors_file": str(path), "weight_name": name, "dtype": "float32"}
        for name in ref.state_dict()
        if name.startswith("blocks.")
    }
    device_map = {"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks": "disk"}
    dispatch_model(model, device_map, main_device="cpu", offload_index=index, skip_keys=["past"])
    assert not list(tmp_path.glob("*.dat")) and not (tmp_path / "index.json").exists()  # nothing copied
    assert model.blocks[2].up.weight.device.type == "meta"
    assert model._hf_hook.execution_device == "cpu" and model._hf_hook.skip_keys == ["past"]
    with torch.no_grad():
        assert torch.equal(model(_ids()), expected)


def test_auto_map_spills_to_disk_without_listing_it(tmp_path: Path) -> None:
    ref = reference()
    _save(ref, tmp_path)
    with init_empty_weights():
        model = TiedLM()
    budget = {"cpu": compute_module_sizes(model)[""] // 2}
    with pytest.raises(ValueError, match="offload_folder"):
        load_checkpoint_and_dispatch(model, tmp_path, device_map="auto", max_memory=budget)
    with init_empty_weights():
        model = TiedLM()
    model = load_checkpoint_and_dispatch(
        model, tmp_path, device_map="auto", max_memory=budget, offload_folder=tmp_path / "off",
        no_split_module_classes=["Block"],
    )  # fmt: skip
    assert set(model.hf_device_map.values()) == {"cpu", "disk"}
    with torch.no_grad():
        assert torch.equal(model(_ids()), ref(_ids()))


def test_attach_execution_device_hook_skips_preloaded_classes() -> None:
    model = reference()
    attach_execution_device_hook(model, "cpu", skip_keys="past", preload_module_classes=["Block"])
    assert isinstance(model._hf_hook, AlignDevicesHook) and model._hf_hook.execution_device == "cpu"
    assert hasattr(model.blocks[0], "_hf_hook") and not hasattr(model.blocks[0].up, "_hf_hook")
    assert hasattr(model.embed, "_hf_hook")
    remove_hook_from_submodules(model)
    assert not any(hasattr(module, "_hf_hook") for module in model.modules())


def test_attach_align_device_hook_on_blocks_with_maps() -> None:
    model = reference()
    with torch.no_grad():
        expected = model(_ids())
    weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    blocks = ["embed", "head", "blocks"]
    attach_align_device_hook_on_blocks(
        model, execution_device=dict.fromkeys(["", *blocks], "cpu"),
        offload={"embed": False, "head": False, "blocks": True}, weights_map=weights,
    )  # fmt: skip
    assert model.blocks[1].down.weight.device.type == "meta" and model.embed.weight.device.type == "cpu"
    assert model._hf_hook.io_same_device
    with torch.no_grad():
        assert torch.equal(model(_ids()), expected)


def test_cpu_offload_hook_moves_the_model_when_called() -> None:
    layer = nn.Linear(3, 2)
    x = torch.randn(4, 3)
    expected = layer(x)
    hook = CpuOffload(execution_device="cpu")
    add_hook_to_module(layer, hook)
    add_hook_to_module(layer, AlignDevicesHook(io_same_device=True), append=True)
    assert isinstance(layer._hf_hook, SequentialHook) and layer._hf_hook.hooks[0] is hook
    assert torch.equal(layer(x), expected)
    remove_hook_from_module(layer)
    assert torch.equal(layer(x), expected)


def test_load_offloaded_weights_fills_an_empty_model(tmp_path: Path) -> None:
    ref = reference()
    offload_state_dict(tmp_path, {k: v for k, v in ref.state_dict().items() if k != "head.weight"})
    with init_empty_weights():
        model = TiedLM()
    load_offloaded_weights(model, json.loads((tmp_path / "index.json").read_text()), tmp_path)
    assert torch.equal(model.blocks[3].up.weight, ref.blocks[3].up.weight)
    assert model.head.weight is model.embed.weight and model.embed.weight.device.type == "cpu"


def test_tied_parameters_on_different_devices_warn(caplog: pytest.LogCaptureFixture) -> None:
    tied = [["embed.weight", "head.weight"]]
    with caplog.at_level(logging.WARNING):
        check_tied_parameters_on_same_device(tied, {"embed": "cpu", "head": "cpu", "blocks": "disk"})
        assert not caplog.records
        check_tied_parameters_on_same_device(tied, {"embed": "cpu", "head": "disk", "blocks": "disk"})
    assert "embed.weight" in caplog.text and "different devices" in caplog.text


def test_moving_a_dispatched_model(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = reference()
    device_map = {"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks": "disk"}
    dispatch_model(model, device_map, offload_dir=tmp_path)
    with pytest.raises(RuntimeError, match=r"offloaded to the CPU or disk \(blocks\.0\.down"):
        model.to("cpu")
    with pytest.raises(RuntimeError, match="offloaded"):
        model.to(torch.float16)  # a cast would break the offloaded blocks as much as a move
    remove_hook_from_submodules(model)
    assert "to" not in vars(model) and "cuda" not in vars(model)
    whole = reference()
    dispatch_model(whole, {"": "cpu"}, force_hooks=True)
    dispatch_model(whole, {"": "cpu"}, force_hooks=True)
    assert not getattr(vars(whole)["to"].__wrapped__, "_accelerate_move_guard", False)  # guarded once
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert whole.to("cpu") is whole
    assert caplog.text.count("Moving a model dispatched by a device map") == 1


def test_prepare_keeps_a_dispatched_model_where_its_map_put_it(tmp_path: Path) -> None:
    from accelerate import Accelerator

    ref = reference()
    _save(ref, tmp_path)
    with init_empty_weights():
        model = TiedLM()
    model = load_checkpoint_and_dispatch(
        model, tmp_path, device_map={"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks": "disk"},
        offload_folder=tmp_path / "off",
    )  # fmt: skip
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(model)
    assert accelerator.verify_device_map(prepared)
    assert prepared.blocks[0].up.weight.device.type == "meta"  # still offloaded, not moved
    with torch.no_grad():
        assert torch.equal(prepared(_ids()), ref(_ids()))


def _prepare_dispatched_on_two_processes() -> str:
    from accelerate import Accelerator

    model = TiedLM()
    dispatch_model(
        model, {"embed": "cpu", "head": "cpu", "scale": "cpu", "blocks": "meta"}, main_device="cpu"
    )
    accelerator = Accelerator(cpu=True)
    try:
        accelerator.prepare(model)
    except ValueError as exc:
        return str(exc)
    return "prepared"


def test_prepare_refuses_a_dispatched_model_across_processes(pool2: WorkerPool) -> None:
    messages = pool2.run(_prepare_dispatched_on_two_processes)
    assert all("device_map" in m and "2 processes" in m and "--num_processes 1" in m for m in messages)
