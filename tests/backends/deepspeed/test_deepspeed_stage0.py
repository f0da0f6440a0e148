"""Stage 0's optimizer state read from a model-states file in each of its three layouts (fp32, bf16
unfused, bf16 fused), the refusal when it cannot be matched to names, and the slots a stage-0
engine's optimizer writes into. The real engines run in test_deepspeed_portable.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from accelerate.backends.deepspeed.stage0 import read_stage0, stage0_slots
from accelerate.storage.errors import CheckpointError

SHAPES = {"0.weight": (3, 2), "0.bias": (3,)}


def _module() -> dict[str, torch.Tensor]:
    module = {name: torch.arange(torch.Size(shape).numel(), dtype=torch.float32).view(shape) for name, shape in SHAPES.items()}  # fmt: skip
    module["norm.running_mean"] = torch.zeros(3)  # a buffer: not a parameter
    return module


def _states(optimizer: dict[str, Any]) -> dict[str, Any]:
    return {"module": _module(), "buffer_names": ["norm.running_mean"], "optimizer": optimizer}


def _groups(n: int) -> list[dict[str, Any]]:
    return [{"lr": 0.1, "params": list(range(n))}]


def test_fp32_the_parameters_are_their_own_masters() -> None:
    state = {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(3, 2)}, 1: {"step": torch.tensor(3.0), "exp_avg": torch.full((3,), 2.0)}}  # fmt: skip
    params, hyper, scalars = read_stage0(_states({"state": state, "param_groups": _groups(2)}), "ckpt")
    assert list(params) == ["0.weight", "0.bias"]
    assert torch.equal(params["0.weight"]["fp32"], _module()["0.weight"])
    assert torch.equal(params["0.bias"]["exp_avg"], torch.full((3,), 2.0))
    assert hyper == [{"lr": 0.1}] and float(scalars[0]["step"]) == 3.0


def test_bf16_unfused_and_fused_masters_are_split_by_parameter() -> None:
    masters = [torch.full((3, 2), 5.0), torch.full((3,), 6.0)]
    inner = {
        "state": {0: {"exp_avg": torch.ones(3, 2)}, 1: {"exp_avg": torch.zeros(3)}},
        "param_groups": _groups(2),
    }
    unfused, _, _ = read_stage0(_states({"optimizer_state_dict": inner, "fp32_groups": [masters]}), "ckpt")
    flat = torch.cat([m.view(-1) for m in masters])
    fused_inner = {"state": {0: {"exp_avg": torch.arange(9.0), "step": 2}}, "param_groups": _groups(2)}
    fused, _, scalars = read_stage0(_states({"optimizer_state_dict": fused_inner, "fp32_groups_flat": [flat]}), "ckpt")  # fmt: skip
    for params in (unfused, fused):
        assert torch.equal(params["0.weight"]["fp32"], masters[0]) and torch.equal(
            params["0.bias"]["fp32"], masters[1]
        )
    assert torch.equal(fused["0.bias"]["exp_avg"], torch.tensor([6.0, 7.0, 8.0])) and scalars == [{"step": 2}]


def test_an_optimizer_without_every_parameter_is_refused() -> None:
    inner = {"state": {}, "param_groups": _groups(1)}
    with pytest.raises(CheckpointError, match="holds 1 parameters and its model 2.*setup that saved it"):
        read_stage0(_states({"optimizer_state_dict": inner, "fp32_groups": [[torch.zeros(3, 2)]]}), "ckpt")


def test_slots_of_a_torch_optimizer_and_an_unknown_one() -> None:
    model = torch.nn.Linear(2, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    inner, slots = stage0_slots(optimizer)
    assert inner is optimizer and slots[id(model.weight)].master is model.weight
    with pytest.raises(CheckpointError, match="stage-0 DeepSpeed optimizer \\(object\\)"):
        stage0_slots(object())
