from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from accelerate import init_empty_weights
from accelerate.hooks import attach_align_device_hook
from accelerate.utils import (
    align_module_device,
    find_tied_parameters,
    has_offloaded_params,
    named_module_tensors,
    retie_parameters,
    set_module_tensor_to_device,
)
from tests.big_modeling.tiny_models import TiedLM


def test_set_module_tensor_to_device_fills_meta_weights() -> None:
    with init_empty_weights():
        model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    value = torch.randn(3, 2, dtype=torch.float64)
    set_module_tensor_to_device(model, "0.weight", "cpu", value=value)
    weight = model[0].weight
    assert isinstance(weight, nn.Parameter) and weight.requires_grad and weight.dtype == torch.float32
    assert torch.equal(weight, value.float())
    set_module_tensor_to_device(model, "0.bias", "cpu", value=torch.zeros(3), dtype=torch.float16)
    assert model[0].bias.dtype == torch.float16
    set_module_tensor_to_device(
        model, "1.num_batches_tracked", "cpu", value=torch.tensor(7), dtype=torch.float16
    )
    assert model[1].num_batches_tracked.dtype == torch.int64  # integers are never cast
    with pytest.raises(ValueError, match="meta device"):
        set_module_tensor_to_device(model, "1.weight", "cpu")
    with pytest.raises(ValueError, match=r"shape torch.Size\(\[2\]\)"):
        set_module_tensor_to_device(model, "1.weight", "cpu", value=torch.zeros(2))
    with pytest.raises(ValueError, match="no parameter or buffer named 'nope'"):
        set_module_tensor_to_device(model, "0.nope", "cpu", value=torch.zeros(1))


def test_moving_between_real_devices_keeps_the_parameter_object() -> None:
    layer = nn.Linear(2, 2)
    weight = layer.weight
    set_module_tensor_to_device(layer, "weight", "cpu", value=torch.ones(2, 2))
    assert layer.weight is weight and torch.equal(weight, torch.ones(2, 2))
    set_module_tensor_to_device(layer, "weight", "meta")
    assert layer.weight.device.type == "meta"


def test_named_module_tensors() -> None:
    norm = nn.BatchNorm1d(2)
    norm.register_buffer("scratch", torch.zeros(1), persistent=False)
    names = [name for name, _ in named_module_tensors(norm)]
    assert names[:2] == ["weight", "bias"] and "scratch" in names
    assert "scratch" not in [n for n, _ in named_module_tensors(norm, remove_non_persistent=True)]
    assert [n for n, _ in named_module_tensors(norm, include_buffers=False)] == ["weight", "bias"]
    outer = nn.Sequential(norm)
    assert "0.weight" in [n for n, _ in named_module_tensors(outer, recurse=True)]
    assert list(named_module_tensors(outer)) == []


def test_find_and_retie_parameters() -> None:
    model = TiedLM(dim=4, layers=1, vocab=5)
    assert find_tied_parameters(model) == [["embed.weight", "head.weight"]]
    model.head.weight = nn.Parameter(model.embed.weight.detach().clone())
    assert find_tied_parameters(model) == []
    retie_parameters(model, [["embed.weight", "head.weight"]])
    assert model.head.weight is model.embed.weight


def test_init_empty_weights_keeps_ties() -> None:
    with init_empty_weights():
        model = TiedLM(dim=4, layers=1, vocab=5)
    assert model.head.weight is model.embed.weight and model.embed.weight.device.type == "meta"


def test_align_module_device_loads_offloaded_weights_for_the_block() -> None:
    layer = nn.Linear(2, 2)
    expected = layer.weight.detach().clone()
    attach_align_device_hook(layer, execution_device="cpu", offload=True)
    assert has_offloaded_params(layer) and layer.weight.device.type == "meta"
    with align_module_device(layer):
        assert torch.equal(layer.weight, expected)
    assert layer.weight.device.type == "meta"
    plain = nn.Linear(2, 2)
    assert not has_offloaded_params(plain)
    before = plain.weight.detach().clone()
    with align_module_device(plain, "cpu"):  # not offloaded: moved for the block, then back
        assert plain.weight.device.type == "cpu"
    assert torch.equal(plain.weight, before)


@pytest.mark.parametrize("meta", [False, True])
def test_a_value_of_another_shape_is_refused_in_upstream_words(meta: bool) -> None:
    # As upstream: checked whether the old tensor has data or is on the meta device.
    with init_empty_weights(include_buffers=False) if meta else contextlib.nullcontext():
        model = nn.Sequential(nn.Linear(3, 4))
    with pytest.raises(ValueError) as error:
        set_module_tensor_to_device(model, "0.weight", "cpu", value=torch.zeros(2, 2))
    assert str(error.value) == (
        'Trying to set a tensor of shape torch.Size([2, 2]) in "weight" (which has shape torch.Size([4, 3])), '
        "this looks incorrect."
    )
