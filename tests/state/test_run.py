"""The run's description: resolved once by connect(), recorded by AcceleratorState, read through it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from accelerate import Accelerator, DistributedType
from accelerate.state import AcceleratorState, PartialState
from accelerate.state.distributed_type import is_multi_device, process_distributed_type
from accelerate.state.run import RunDescription, describe_process
from accelerate.utils import TorchDynamoPlugin
from accelerate.utils.errors import NotAvailableYetError


def test_the_accelerator_records_one_frozen_description() -> None:
    accelerator = Accelerator(
        cpu=True, mixed_precision="bf16", dynamo_plugin=TorchDynamoPlugin(backend="eager")
    )
    run = accelerator.state.run
    assert isinstance(run, RunDescription)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.mixed_precision = "fp16"  # type: ignore[misc]
    assert (run.strategy, run.distributed_type, run.mixed_precision) == (
        "single_device",
        DistributedType.NO,
        "bf16",
    )
    assert run.topology.num_processes == 1 and run.topology.device == torch.device("cpu")
    assert run.topology.node_index == 0
    # The state's public attributes are the description's.
    state = AcceleratorState()
    assert state is accelerator.state and state.run is run
    assert (state.mixed_precision, state.distributed_type, state.dynamo_backend) == ("bf16", "NO", "EAGER")
    assert state.dynamo_plugin is accelerator.dynamo_plugin
    assert state.fsdp_plugin is None and state.deepspeed_plugins is None and state.device_mesh is None
    assert AcceleratorState._shared_state["mixed_precision"] == "bf16"


def test_assigning_an_attribute_records_a_new_description() -> None:
    state = Accelerator(cpu=True).state
    before = state.run
    stand_in = object()
    state.fsdp_plugin = stand_in  # upstream code assigns plain attributes; ours stays one description
    assert state.fsdp_plugin is stand_in and state.run.fsdp_plugin is stand_in
    assert before.fsdp_plugin is None and state.run is not before


def test_direct_construction_describes_the_process() -> None:
    state = AcceleratorState(mixed_precision="fp16", cpu=True)
    assert state.run.strategy is None  # no Accelerator chose a strategy
    assert (state.mixed_precision, state.distributed_type) == ("fp16", PartialState().distributed_type)
    # Recorded as given, as upstream's AcceleratorState: only an Accelerator checks it (the backend table).
    AcceleratorState._reset_state()
    given = object()
    assert AcceleratorState(megatron_lm_plugin=given).megatron_lm_plugin is given
    AcceleratorState._reset_state()
    with pytest.raises(NotAvailableYetError, match="megatron_lm_plugin"):
        Accelerator(cpu=True, megatron_lm_plugin=given)


def test_describe_process_with_deepspeed_plugins_is_a_deepspeed_run() -> None:
    class Plugin:
        selected = True

    plugins = {"default": Plugin()}
    run = describe_process(PartialState(cpu=True), mixed_precision=None, deepspeed_plugins=plugins)
    assert run.distributed_type == DistributedType.DEEPSPEED and run.mixed_precision == "no"
    assert run.deepspeed_plugin is plugins["default"] and not run.multi_device


@pytest.mark.parametrize(
    ("device", "world", "expected", "multi"),
    [("cpu", 1, "NO", False), ("cpu", 2, "MULTI_CPU", False), ("cuda", 2, "MULTI_GPU", True),
     ("xpu", 4, "MULTI_XPU", True), ("mps", 2, "MULTI_MPS", False)],
)  # fmt: skip
def test_the_process_type_and_multi_device(device: str, world: int, expected: str, multi: bool) -> None:
    kind = process_distributed_type(device, world)
    assert kind == expected and is_multi_device(kind) is multi
    assert process_distributed_type(device, world, xla=True) == DistributedType.XLA
    assert not is_multi_device(DistributedType.FSDP)  # upstream: a sharded run reports FSDP, not MULTI_GPU
