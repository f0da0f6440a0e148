from __future__ import annotations

import pytest
import torch

from accelerate import init_empty_weights
from accelerate.utils import (
    check_device_map,
    clean_device_map,
    compute_module_sizes,
    find_tied_parameters,
    get_balanced_memory,
    get_max_memory,
    infer_auto_device_map,
)
from accelerate.utils.modeling import fallback_allocate
from tests.big_modeling.tiny_models import TiedLM


def _empty() -> TiedLM:
    with init_empty_weights():
        return TiedLM()


def test_get_max_memory() -> None:
    found = get_max_memory()
    assert found["cpu"] > 0 and list(found)[-1] == "cpu"
    assert get_max_memory({"disk": "1GB", "cpu": "10KiB"}) == {"cpu": 10 * 1024, "disk": 10**9}
    with pytest.raises(ValueError, match="GPU"):
        get_max_memory({torch.cuda.device_count(): "1GB"})
    with pytest.raises(ValueError, match="not a device"):
        get_max_memory({"gpu0": "1GB"})


def test_balanced_memory_without_gpus_is_unchanged() -> None:
    assert get_balanced_memory(_empty(), max_memory={"cpu": 1000}) == {"cpu": 1000}


def test_everything_fits_on_cpu() -> None:
    assert infer_auto_device_map(_empty(), max_memory={"cpu": "1GB"}) == {"": "cpu"}


def test_small_cpu_budget_spills_to_disk_and_keeps_ties_together() -> None:
    model = _empty()
    sizes = compute_module_sizes(model)
    device_map = infer_auto_device_map(
        model, max_memory={"cpu": sizes[""] // 2, "disk": "1GB"}, no_split_module_classes=["Block"]
    )
    assert set(device_map.values()) == {"cpu", "disk"}
    assert device_map["embed"] == device_map["head"]  # tied weight: one device
    on_cpu = sum(sizes[name] for name, device in device_map.items() if device == "cpu")
    # The CPU keeps room for the largest block, loaded there when an offloaded block runs.
    assert on_cpu + sizes["blocks.0"] <= sizes[""] // 2
    check_device_map(model, device_map)
    assert not any(name.startswith("blocks.0.") for name in device_map)  # Block never split


def test_unsplittable_block_too_large_without_disk_names_it() -> None:
    model = _empty()
    sizes = compute_module_sizes(model)
    with pytest.raises(ValueError, match=rf"'blocks.0' \(Block, {sizes['blocks.0']} bytes\)"):
        infer_auto_device_map(
            model, max_memory={"cpu": sizes["blocks.0"] - 1, "disk": 0}, no_split_module_classes=["Block"]
        )


def test_blocks_split_when_allowed() -> None:
    model = _empty()
    sizes = compute_module_sizes(model)
    device_map = infer_auto_device_map(model, max_memory={"cpu": sizes[""] // 2, "disk": "1GB"}, clean_result=False)
    assert any(name.count(".") >= 2 for name in device_map)  # inside a block
    check_device_map(model, device_map)


def test_fallback_allocate_finds_a_smaller_block() -> None:
    model = _empty()
    sizes = compute_module_sizes(model)
    todo = list(model.named_children())
    ties = find_tied_parameters(model)
    name, _, rest = fallback_allocate(todo, sizes, sizes["blocks.0.norm"], ["Block"], ties)
    assert name is None and rest == todo  # blocks are atomic and larger
    name, _, rest = fallback_allocate(todo, sizes, sizes["blocks.0.norm"], [], ties)
    assert name is not None and sizes[name] <= sizes["blocks.0.norm"]
    assert name not in [n for n, _ in rest]


def test_clean_device_map() -> None:
    assert clean_device_map({"a.0": "cpu", "a.1": "cpu", "b": "disk"}) == {"a": "cpu", "b": "disk"}
    assert clean_device_map({"a.0": "cpu", "a.1": "disk"}) == {"a.0": "cpu", "a.1": "disk"}
    assert clean_device_map({"a": "cpu", "b": "cpu"}) == {"": "cpu"}


def test_check_device_map_errors_name_the_problem() -> None:
    model = _empty()
    with pytest.raises(ValueError, match="'decoder'"):
        check_device_map(model, {"": "cpu", "decoder": "cpu"})
    with pytest.raises(ValueError, match="'cuda:7'"):
        check_device_map(model, {"": "cuda:7"})
    with pytest.raises(ValueError, match="head.weight|blocks.0.up.weight"):
        check_device_map(model, {"embed": "cpu"})
    check_device_map(model, {"embed": "cpu", "blocks": "disk", "head": "cpu", "scale": "cpu"})
