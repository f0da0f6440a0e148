"""The healing format: JSON plus raw tensors, round-tripped exactly; anything else refused."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from accelerate.backends.fault_tolerance import wire


def _roundtrip(tree: object) -> object:
    header, tensors = wire.encode(tree)
    parsed, specs = wire.tensor_specs(header)
    received = []
    for (dtype, shape), tensor in zip(specs, tensors):
        out = torch.empty(shape, dtype=dtype)
        out.copy_(tensor)
        received.append(out)
    return wire.decode(parsed, received)


def test_a_training_state_round_trips_with_key_types_and_tuples() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    state = {"models": [model.state_dict()], "optimizers": [optimizer.state_dict()], "loader": {"epoch": 1},
             "odd": [float("inf"), None, True, "x", (1, 2)], "half": torch.ones(2, dtype=torch.bfloat16)}  # fmt: skip
    back = _roundtrip(state)
    assert isinstance(back, dict)
    assert back["optimizers"][0]["param_groups"][0]["betas"] == (0.9, 0.999)
    assert set(back["optimizers"][0]["state"]) == {0, 1}  # int keys stay ints
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters())
    fresh.load_state_dict(back["optimizers"][0])
    for key, value in model.state_dict().items():
        assert torch.equal(back["models"][0][key], value)
    assert back["odd"] == [float("inf"), None, True, "x", (1, 2)]
    assert back["half"].dtype == torch.bfloat16


def test_objects_that_are_not_data_are_refused_naming_where() -> None:
    with pytest.raises(TypeError, match=r"state\['bad'\] is a object"):
        wire.encode({"bad": object()})


def test_a_header_is_parsed_as_json_never_unpickled() -> None:
    with pytest.raises((ValueError, UnicodeDecodeError)):
        wire.tensor_specs(pickle.dumps({"tree": {"v": 1}, "tensors": []}))
    bad = json.dumps({"tree": {"t": 0}, "tensors": [{"dtype": "object", "shape": [1]}]}).encode()
    with pytest.raises(ValueError, match="bad tensor description"):
        wire.tensor_specs(bad)
    with pytest.raises(ValueError, match="bad node"):
        wire.decode({"t": 5}, [])
