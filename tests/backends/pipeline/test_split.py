"""Where "auto" cuts a model, and the checks on split points a user names (one process, no tracing)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accelerate.backends.pipeline.split import auto_split_points, check_split_points, generate_device_map


def _blocks(n: int) -> nn.Sequential:
    return nn.Sequential(*[nn.Linear(16, 16) for _ in range(n)])


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 32)
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(4)])
        self.head = nn.Linear(32, 3)


@pytest.mark.parametrize(
    "blocks, stages, expected",
    [
        (6, 2, [0, 0, 0, 1, 1, 1]),
        (6, 3, [0, 0, 1, 1, 2, 2]),
        # Filling in order to the smallest budget would use three stages of two: the fourth gets a block too.
        (6, 4, [0, 1, 2, 2, 3, 3]),
        (4, 4, [0, 1, 2, 3]),
    ],
)
def test_equal_blocks_are_spread_evenly_over_every_stage(
    blocks: int, stages: int, expected: list[int]
) -> None:
    device_map = generate_device_map(_blocks(blocks), num_processes=stages)
    assert list(device_map.values()) == expected
    assert auto_split_points(_blocks(blocks), stages) == [
        str(expected.index(stage)) for stage in range(1, stages)
    ]


def test_no_split_module_classes_keep_blocks_whole(caplog: pytest.LogCaptureFixture) -> None:
    whole = generate_device_map(Stack(), num_processes=2, no_split_module_classes=["Sequential"])
    assert whole == {"embed": 0, "layers.0": 0, "layers.1": 0, "layers.2": 1, "layers.3": 1, "head": 1}
    assert auto_split_points(Stack(), 2, ["Sequential"]) == ["layers.2"]
    # Without it a block may be cut inside; the split point is still a module.
    assert auto_split_points(Stack(), 2)[0] in dict(Stack().named_modules())
    # Stages are numbered like GPUs in a device map, but a CPU machine is not warned about missing GPUs.
    assert "does not have" not in caplog.text


def test_one_process_and_explicit_budgets_are_plain_device_maps() -> None:
    assert set(generate_device_map(_blocks(3), num_processes=1).values()) <= {"cpu", 0}
    planned = generate_device_map(
        _blocks(4), num_processes=2, max_memory={0: 3 * 1088, 1: 3 * 1088, "disk": 0}
    )
    # Given budgets are planned as upstream's planner does: stage 0 keeps room for the largest block.
    assert list(planned.values()) == [0, 0, 1, 1]


def test_a_model_with_too_few_blocks_names_the_empty_stage() -> None:
    with pytest.raises(ValueError, match=r"found no module to begin stage 1 of 2.*split_points=\[\.\.\.\]"):
        auto_split_points(nn.Sequential(nn.Linear(2, 2)), 2)


def test_split_points_a_user_names_are_checked() -> None:
    model = Stack()
    assert check_split_points(model, ["layers.2"], 2) == ["layers.2"]
    assert check_split_points(model, ("layers.1", "layers.3"), 3) == ["layers.1", "layers.3"]
    with pytest.raises(
        ValueError, match=r"\['layers\.7'\] are not modules of Stack.*\['embed', 'layers', 'head'\]"
    ):
        check_split_points(model, ["layers.7"], 2)
    with pytest.raises(ValueError, match="2 split points give 3 stages, more than the 2 processes"):
        check_split_points(model, ["layers.1", "layers.2"], 2)
    with pytest.raises(ValueError, match="1 split points give 2 stages, fewer than the 3 processes"):
        check_split_points(model, ["layers.1"], 3)
    with pytest.raises(ValueError, match="more than once"):
        check_split_points(model, ["layers.1", "layers.1"], 3)
    with pytest.raises(TypeError, match="'auto' or a list of module names"):
        check_split_points(model, 3, 2)
    with pytest.raises(TypeError, match=r"strings.*\[2\]"):
        check_split_points(model, ["layers.1", 2], 3)


def test_the_planner_sees_the_model_on_the_meta_device() -> None:
    from accelerate import init_empty_weights

    with init_empty_weights():
        model = _blocks(6)
    assert next(model.parameters()).device == torch.device("meta")
    assert auto_split_points(model, 2) == ["3"]
