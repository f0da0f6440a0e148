from __future__ import annotations

import logging

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
    with pytest.raises(ValueError, match="not a device"):
        get_max_memory({"gpu0": "1GB"})


def test_get_max_memory_keeps_gpus_this_machine_lacks(caplog: pytest.LogCaptureFixture) -> None:
    # Upstream warns and keeps the budget: a device map may be planned here for another machine.
    absent = torch.cuda.device_count()
    with caplog.at_level(logging.WARNING):
        budgets = get_max_memory({"cpu": "1KB", f"cuda:{absent + 1}": 20, absent: "10KB"})
    assert budgets == {absent: 10**4, absent + 1: 20, "cpu": 1000}
    assert f"GPU {absent}" in caplog.text and f"GPU 'cuda:{absent + 1}'" in caplog.text


def test_device_maps_are_planned_for_gpus_this_machine_lacks() -> None:
    model = _empty()
    sizes = compute_module_sizes(model)
    first, second = torch.cuda.device_count(), torch.cuda.device_count() + 1
    budgets = {first: sizes[""] // 2, second: sizes[""] // 2, "cpu": sizes[""]}
    device_map = infer_auto_device_map(model, max_memory=budgets, no_split_module_classes=["Block"])
    assert {first, second} <= set(device_map.values())
    check_device_map(model, device_map)  # planning only: nothing is moved
    balanced = get_balanced_memory(model, max_memory={first: "1GB", second: "1GB", "cpu": "1GB"})
    assert balanced[first] < 10**9 and balanced[second] == 10**9  # spread over both GPUs
    low_zero = get_balanced_memory(model, max_memory={first: "1GB", second: "1GB"}, low_zero=True)
    assert low_zero[first] < balanced[first]


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
        # The CPU keeps room for the largest block (a Block): the embedding fits beside it, no Block does.
        budget = sizes["blocks.0"] + sizes["embed"] + 100
        infer_auto_device_map(model, max_memory={"cpu": budget, "disk": 0}, no_split_module_classes=["Block"])


def test_blocks_split_when_allowed() -> None:
    model = _empty()
    sizes = compute_module_sizes(model)
    device_map = infer_auto_device_map(
        model, max_memory={"cpu": sizes[""] // 2, "disk": "1GB"}, clean_result=False
    )
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


def test_check_device_map_warns_about_unknown_keys_in_upstream_words() -> None:
    from tests.big_modeling.test_planner import ModelForTest

    device_map = {
        "linear1": "cpu",
        "batchnorm": "cpu",
        "linear2": "cpu",
        "invalid_module": 0,
        "another_invalid": 1,
    }
    with pytest.warns(UserWarning) as record:
        check_device_map(ModelForTest(), device_map)
    assert str(record[0].message).startswith(
        "The following device_map keys do not match any submodules in the model: ['invalid_module', 'another_invalid']"
    )


def test_check_device_map_errors_name_the_problem() -> None:
    model = _empty()
    # Upstream ignores names the model lacks; we warn, naming them, and go on.
    with pytest.warns(UserWarning, match="'decoder'"):
        check_device_map(model, {"": "cpu", "decoder": "cpu"})
    check_device_map(model, {"": "cuda:7"})  # a device of another machine: the map itself is fine
    with pytest.raises(ValueError, match="'gpu0'"):
        check_device_map(model, {"": "gpu0"})  # not a device anywhere
    with pytest.raises(ValueError, match="head.weight|blocks.0.up.weight"):
        check_device_map(model, {"embed": "cpu"})
    check_device_map(model, {"embed": "cpu", "blocks": "disk", "head": "cpu", "scale": "cpu"})
