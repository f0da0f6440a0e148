"""infer_auto_device_map's options, each changing the map it returns: the disk as last resort, dtype,
special_dtypes, offload_buffers, fallback_allocation, verbose."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accelerate import init_empty_weights
from accelerate.utils import compute_module_sizes, infer_auto_device_map
from tests.big_modeling.tiny_models import TiedLM


def _empty() -> TiedLM:
    with init_empty_weights():
        return TiedLM()


def test_the_disk_is_the_last_resort_unless_refused() -> None:
    # As upstream: a model larger than the listed budgets spills to the disk even when max_memory
    # does not name it; "disk": 0 refuses the disk.
    model = _empty()
    sizes = compute_module_sizes(model)
    device_map = infer_auto_device_map(
        model, max_memory={"cpu": sizes[""] // 2}, no_split_module_classes=["Block"]
    )
    assert set(device_map.values()) == {"cpu", "disk"}
    with pytest.raises(ValueError, match=rf"'blocks.\d' \(Block, {sizes['blocks.0']} bytes\).*'disk': 0"):
        infer_auto_device_map(
            model, max_memory={"cpu": sizes[""] // 2, "disk": 0}, no_split_module_classes=["Block"]
        )


def test_dtype_and_special_dtypes_size_the_blocks() -> None:
    model = _empty()
    full = compute_module_sizes(model)[""]
    budget = {"cpu": int(full * 0.7), "disk": "1GB"}
    assert "disk" in infer_auto_device_map(model, max_memory=budget).values()
    assert infer_auto_device_map(model, max_memory=budget, dtype=torch.float16) == {"": "cpu"}
    # Every weight kept in float32 through special_dtypes: as large as without dtype again.
    keep = {name: torch.float32 for name, _ in model.named_parameters()}
    assert (
        "disk"
        in infer_auto_device_map(model, max_memory=budget, dtype="float16", special_dtypes=keep).values()
    )


class _BufferBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.register_buffer("table", torch.zeros(256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.table[:16]


def test_offload_buffers_changes_no_plan() -> None:
    # As upstream: buffers are not counted against a device's budget; offload_buffers only silences
    # the warning about buffers of offloaded blocks that no GPU can hold (see test_planner).
    with init_empty_weights():
        model = nn.Sequential(*[_BufferBlock() for _ in range(4)])
    sizes = compute_module_sizes(model)
    budget = {"cpu": 2 * sizes["0"] + sizes["0.linear"], "disk": "1GB"}
    options = {"max_memory": budget, "no_split_module_classes": ["_BufferBlock"], "clean_result": False}
    kept = infer_auto_device_map(model, **options)  # type: ignore[arg-type]
    offloaded = infer_auto_device_map(model, offload_buffers=True, **options)  # type: ignore[arg-type]
    assert kept == offloaded == {"0": "cpu", "1": "disk", "2": "disk", "3": "disk"}


def test_fallback_allocation_fills_a_device_the_next_block_skips() -> None:
    with init_empty_weights():
        model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64), nn.Linear(4, 4))
    sizes = compute_module_sizes(model)
    # The CPU keeps room for the largest layer; what is left holds the small layer, not a large one.
    budget = {"cpu": sizes["0"] + sizes["2"], "disk": "1GB"}
    assert infer_auto_device_map(model, max_memory=budget) == {"": "disk"}
    expected = {"0": "disk", "1": "disk", "2": "cpu"}
    assert infer_auto_device_map(model, max_memory=budget, fallback_allocation=True) == expected


def test_verbose_prints_each_decision(capsys: pytest.CaptureFixture[str]) -> None:
    model = _empty()
    budget = {"cpu": compute_module_sizes(model)[""] // 2, "disk": "1GB"}
    infer_auto_device_map(model, max_memory=budget, no_split_module_classes=["Block"], verbose=True)
    out = capsys.readouterr().out
    assert "blocks.0" in out and "'cpu'" in out and "'disk'" in out
    infer_auto_device_map(model, max_memory=budget, no_split_module_classes=["Block"])
    assert capsys.readouterr().out == ""


def test_balanced_budgets_spread_the_model_over_gpus() -> None:
    # GPU budgets given as numbers (no GPU here): the balancing itself, as get_balanced_memory does it.
    from accelerate.big_modeling.budgets import balance_budgets

    model = _empty()
    sizes = compute_module_sizes(model)
    big = 10 * sizes[""]
    room = int(1.25 * sizes["blocks.0"])  # the largest no-split block is larger than the mean leaf
    balanced = balance_budgets(model, {0: big, 1: big, 2: big, "cpu": big}, ["Block"])
    assert balanced == {0: sizes[""] // 3 + room, 1: sizes[""] // 3 + room, 2: big, "cpu": big}
    low = balance_budgets(model, {0: big, 1: big, 2: big, "cpu": big}, ["Block"], low_zero=True)
    assert low[0] == 0 and low[1] == sizes[""] // 2 + room and low[2] == big
    assert balance_budgets(model, {0: big, "cpu": big}, user_set=False) == {0: int(big * 0.9), "cpu": big}
    assert balance_budgets(model, {0: big, "cpu": big}) == {0: big, "cpu": big}
