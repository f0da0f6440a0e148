"""A rank's pipeline stages: the model's other tensors are freed, the same objects kept."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accelerate.backends.parallel.pipeline_stage import is_released, release_other_stages


def test_release_frees_what_no_stage_holds_and_keeps_the_tensors() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    stage = nn.Module()
    stage.register_parameter("weight", model[2].weight)  # a traced stage shares the model's tensors
    stage.register_parameter("bias", model[2].bias)
    ids = [id(p) for p in model.parameters()]
    expected = sum(t.numel() * t.element_size() for t in (*model[0:2].parameters(), *model[1].buffers()))
    assert release_other_stages(model, [stage]) == expected
    assert [id(p) for p in model.parameters()] == ids  # optimizers and clipping find them by identity
    assert is_released(model[0].weight) and is_released(model[1].running_mean)
    assert not is_released(model[2].weight)
    torch.testing.assert_close(stage.weight + 0, model[2].weight)  # the stage's own weights untouched
    with pytest.raises(RuntimeError):  # no stale weights: computing with one fails
        model(torch.ones(2, 4))
    assert release_other_stages(model, [stage]) == 0  # freed once


def test_a_cut_models_own_state_dict_is_an_error_naming_the_way_out() -> None:
    from accelerate.backends.parallel.pipeline_stage import guard_released
    from accelerate.checkpointing.internal_reads import internal_state_read

    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    stage = nn.Module()
    stage.register_parameter("weight", model[1].weight)
    release_other_stages(model, [stage])
    guard_released(model)
    # It would hold empty tensors for the freed stage (a torch.save of it: most of the model missing).
    with pytest.raises(RuntimeError, match=r"accelerator\.get_state_dict\(model\)"):
        model.state_dict()
    with internal_state_read():  # accelerate's own reads (the keys, this rank's stages)
        assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
