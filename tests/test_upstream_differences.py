"""The signature and behaviour differences issue 10 lists, each checked against upstream's facts."""

from __future__ import annotations

import inspect

import torch

from accelerate import Accelerator, DistributedType
from accelerate.state import PartialState
from accelerate.utils import (
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    gather_object,
    reduce,
    slice_tensors,
    synchronize_rng_state,
)
from tests.training_helpers import make_model


def test_utils_reduce_defaults_to_mean_and_accelerator_reduce_to_sum() -> None:
    assert inspect.signature(reduce).parameters["reduction"].default == "mean"
    assert inspect.signature(Accelerator.reduce).parameters["reduction"].default == "sum"


def test_parameter_names_match_upstream() -> None:
    assert list(inspect.signature(gather_object).parameters) == ["object"]
    assert gather_object(object=3) == [3]
    assert list(inspect.signature(slice_tensors).parameters) == [
        "data", "tensor_slice", "process_index", "num_processes",
    ]  # fmt: skip
    assert slice_tensors({"a": torch.arange(4)}, slice(1, 3), 0, 1)["a"].tolist() == [1, 2]
    assert inspect.signature(synchronize_rng_state).parameters["rng_type"].default is None
    synchronize_rng_state()  # one process: nothing to do, and None is accepted


def test_on_main_process_with_and_without_parentheses() -> None:
    state = PartialState()

    @state.on_main_process
    def bare() -> int:
        return 1

    @state.on_main_process()
    def called() -> int:
        return 2

    accelerator = Accelerator()

    @accelerator.on_local_main_process()
    def local() -> int:
        return 3

    assert (bare(), called(), local()) == (1, 2, 3)


def test_zero_grad_set_to_none_defaults_to_none_meaning_torch_default() -> None:
    accelerator = Accelerator()
    model = make_model()
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert inspect.signature(optimizer.zero_grad).parameters["set_to_none"].default is None
    model(torch.ones(2, 8)).sum().backward()
    optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    model(torch.ones(2, 8)).sum().backward()
    optimizer.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_kwargs_handler_to_dict() -> None:
    assert GradScalerKwargs(init_scale=8.0).to_dict() == {
        "init_scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000, "enabled": True,
    }  # fmt: skip
    ddp = DistributedDataParallelKwargs(find_unused_parameters=True).to_dict()
    assert ddp["find_unused_parameters"] is True and "comm_hook" not in ddp and "comm_wrapper" not in ddp
    assert callable(DistributedDataParallelKwargs().register_comm_hook)


def test_distributed_type_str_and_members_match_upstream() -> None:
    assert str(DistributedType.NO) == "DistributedType.NO"
    assert DistributedType.MULTI_GPU == "MULTI_GPU"
    for name in ("MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_HPU", "TP", "MEGATRON_LM"):
        assert DistributedType[name].value == name


# parallelism_config runs plain data parallelism now: tests/state/test_parallelism.py; torch_tp_plugin
# means ParallelismConfig(tp_size=...) with upstream's FutureWarning: tests/state/test_parallelism_env.py.
