"""Healing by point-to-point sends: the receiver gets the sender's state, checked against the step."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import torch

pytest.importorskip("torchft")

from accelerate.backends.fault_tolerance.transport import TensorTransport  # noqa: E402


class _Done:
    def wait(self, timeout: Any = None) -> bool:
        return True


class _Wire:
    """A loopback stand-in for the process group: sends queue by tag, receives copy them out."""

    def __init__(self) -> None:
        self.sent: dict[int, torch.Tensor] = {}

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> _Done:
        self.sent[tag] = tensors[0].clone()
        return _Done()

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> _Done:
        tensors[0].copy_(self.sent[tag])
        return _Done()


def test_the_state_arrives_bit_identical() -> None:
    model = torch.nn.Linear(4, 3)
    state = {
        "user": {"accelerate": {"models": [model.state_dict()]}},
        "torchft": {"step": 7, "batches_committed": 21},
    }
    wire = _Wire()
    transport = TensorTransport(wire, timedelta(seconds=5))
    transport.send_checkpoint([1], step=7, state_dict=state, timeout=timedelta(seconds=5))
    got = transport.recv_checkpoint(0, transport.metadata(), step=7, timeout=timedelta(seconds=5))
    assert got["torchft"] == {"step": 7, "batches_committed": 21}
    for key, value in model.state_dict().items():
        assert torch.equal(got["user"]["accelerate"]["models"][0][key], value)
    assert transport.last_receive_s is not None


def test_a_state_of_another_step_is_refused() -> None:
    wire = _Wire()
    transport = TensorTransport(wire, timedelta(seconds=5))
    transport.send_checkpoint([1], step=3, state_dict={"x": torch.ones(1)}, timeout=timedelta(seconds=5))
    with pytest.raises(ValueError, match="another step than 4"):
        transport.recv_checkpoint(0, "", step=4, timeout=timedelta(seconds=5))
