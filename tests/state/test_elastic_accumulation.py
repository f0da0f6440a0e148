"""`GradientAccumulationPlugin(adjust_for_world_size=True)`: an elastic run that shrinks keeps its global batch."""

from __future__ import annotations

import pytest

from accelerate.state.gradient import ELASTIC_MAX_PROCESSES_ENV, adjusted_for_world_size
from accelerate.utils import GradientAccumulationPlugin


def test_the_default_keeps_the_per_process_batch() -> None:
    plugin = GradientAccumulationPlugin(num_steps=2, reference_world_size=4)
    assert adjusted_for_world_size(plugin, 2) is plugin  # the global batch halves with the world


@pytest.mark.parametrize(("world", "steps"), [(4, 2), (2, 4), (1, 8), (8, 1)])
def test_opting_in_raises_accumulation_to_keep_the_global_batch(world: int, steps: int) -> None:
    plugin = GradientAccumulationPlugin(num_steps=2, adjust_for_world_size=True, reference_world_size=4)
    assert adjusted_for_world_size(plugin, world).num_steps == steps
    assert plugin.num_steps == 2  # the user's plugin is not changed


def test_the_reference_defaults_to_the_largest_group_the_launch_allows() -> None:
    plugin = GradientAccumulationPlugin(num_steps=3, adjust_for_world_size=True)
    assert adjusted_for_world_size(plugin, 1, {ELASTIC_MAX_PROCESSES_ENV: "2"}).num_steps == 6
    assert adjusted_for_world_size(plugin, 1, {}) is plugin  # not an elastic launch: nothing to keep


def test_a_global_batch_that_cannot_be_kept_exactly_raises() -> None:
    plugin = GradientAccumulationPlugin(num_steps=1, adjust_for_world_size=True, reference_world_size=2)
    with pytest.raises(ValueError, match="do not split evenly over 3 processes"):
        adjusted_for_world_size(plugin, 3)
    with pytest.raises(ValueError, match="reference_world_size=0"):
        GradientAccumulationPlugin(reference_world_size=0)


def test_the_accelerator_accumulates_the_adjusted_steps() -> None:
    from accelerate import Accelerator

    plugin = GradientAccumulationPlugin(num_steps=2, adjust_for_world_size=True, reference_world_size=2)
    accelerator = Accelerator(cpu=True, gradient_accumulation_plugin=plugin)
    assert accelerator.gradient_accumulation_steps == 4
    assert accelerator.gradient_state.adjusted_for_world_size
