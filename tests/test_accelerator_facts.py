"""Accelerator members upstream has and clients read: facts, ranks, fp8/LOMO/context-parallel members,
verify_device_map, unscale_gradients."""

from __future__ import annotations

import contextlib

import pytest
import torch

from accelerate import Accelerator
from accelerate.precision.fp8.recipes import FP8BackendType
from accelerate.utils.dataclasses import DataLoaderConfiguration, GradScalerKwargs
from tests.helpers.pool import WorkerPool


def test_facts_in_one_process() -> None:
    accelerator = Accelerator(
        cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=False)
    )
    assert accelerator.multi_device is False
    assert accelerator.use_stateful_dataloader is False
    assert accelerator.should_save_model is True
    ranks = (
        accelerator.data_parallel_rank, accelerator.data_parallel_shard_rank, accelerator.context_parallel_rank,
        accelerator.tensor_parallel_rank, accelerator.pipeline_parallel_rank,
    )  # fmt: skip
    assert ranks == (0, 0, 0, 0, 0)
    assert accelerator.torch_device_mesh is None and accelerator.parallelism_config is None
    assert accelerator.is_composable_parallelism_enabled is False and accelerator.is_fsdp2 is False
    assert accelerator.deepspeed_plugin is None and accelerator.state.deepspeed_plugin is None
    assert accelerator.state.fsdp_plugin is None and accelerator.state.is_fsdp2 is False
    assert accelerator.fp8_backend is FP8BackendType.NO
    assert not (accelerator.fp8_enabled or accelerator.has_fp8_handler or accelerator.has_lomo_optimizer)
    assert accelerator.fp8_recipe_handler is None and accelerator.delayed_fp8_autocast is False


def _facts() -> tuple[bool, int, str]:
    accelerator = Accelerator(cpu=True)
    return accelerator.multi_device, accelerator.data_parallel_rank, accelerator.distributed_type.value


def test_facts_in_two_cpu_processes(pool2: WorkerPool) -> None:
    # Upstream's multi_device means several accelerator devices: CPU processes are MULTI_CPU, not it.
    assert pool2.run(_facts) == [(False, 0, "MULTI_CPU"), (False, 1, "MULTI_CPU")]


def _fsdp_ranks(plugin_kwargs: dict[str, object]) -> tuple[int, int, str, bool]:
    from accelerate.utils import FullyShardedDataParallelPlugin

    accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(**plugin_kwargs))  # type: ignore[arg-type]
    return (
        accelerator.data_parallel_rank,
        accelerator.data_parallel_shard_rank,
        accelerator.distributed_type.value,
        accelerator.multi_device,
    )


def test_fsdp_ranks_are_the_mesh_ranks(pool2: WorkerPool) -> None:
    # Full sharding: one replica, every process one shard of it (upstream's dp_shard rank).
    assert pool2.run(_fsdp_ranks, {"fsdp_version": 2}) == [(0, 0, "FSDP", False), (0, 1, "FSDP", False)]
    # NO_SHARD replicates: every process a replica holding the whole model.
    assert pool2.run(_fsdp_ranks, {"sharding_strategy": "NO_SHARD"}) == [
        (0, 0, "FSDP", False),
        (1, 0, "FSDP", False),
    ]


def test_context_and_sequence_parallel_helpers_pass_through() -> None:
    accelerator = Accelerator(cpu=True)
    with accelerator.maybe_context_parallel(buffers=[torch.ones(2)], buffer_seq_dims=[0]) as entered:
        assert entered is None
    loader = [1, 2, 3]
    assert accelerator.deepspeed_ulysses_dl_adapter(loader, torch.nn.Linear(1, 1)) is loader


def test_lomo_and_deepspeed_state_lookups_raise_the_one_error() -> None:
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError, match="needs a prepared lomo_optim.Lomo or AdaLomo"):
        accelerator.lomo_backward(torch.ones(()), 0.1)
    # without DeepSpeed there is no plugin to look up: the error says which ones exist (none)
    with pytest.raises(ValueError, match="No DeepSpeed plugin named 'default'; this run has none"):
        accelerator.state.get_deepspeed_plugin("default")
    with pytest.raises(ValueError, match="DeepSpeed plugins are none"):
        accelerator.state.select_deepspeed_plugin()
    assert accelerator.state.deepspeed_plugins is None and accelerator.deepspeed_plugin is None


def test_verify_device_map() -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    assert accelerator.verify_device_map(model) is False
    model.hf_device_map = {"0": "cpu", "1": "cpu"}  # type: ignore[assignment]
    assert accelerator.verify_device_map(model) is False
    model[1].hf_device_map = {"": "cpu", "x": "disk"}  # type: ignore[assignment]
    assert accelerator.verify_device_map(model) is True


def test_unscale_gradients_under_fp16_matches_raw_grad_scaler() -> None:
    torch.manual_seed(0)
    accelerator = Accelerator(
        cpu=True, mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=8.0)]
    )
    model = torch.nn.Linear(4, 1)
    reference = torch.nn.Linear(4, 1)
    reference.load_state_dict(model.state_dict())
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(3, 4)
    accelerator.backward(model(x).float().sum())
    accelerator.unscale_gradients()  # every prepared optimizer
    accelerator.unscale_gradients(optimizer)  # once per step: a second call changes nothing
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    with torch.autocast("cpu", dtype=torch.float16):
        out = reference(x).float().sum()
    scaler.scale(out).backward()
    scaler.unscale_(torch.optim.SGD(reference.parameters(), lr=0.1))
    assert reference.weight.grad is not None and model.weight.grad is not None
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)


def test_unscale_gradients_without_a_scaler_is_a_no_op() -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    model(torch.ones(1, 2)).sum().backward()
    before = model.weight.grad.clone()  # type: ignore[union-attr]
    accelerator.unscale_gradients([optimizer])
    assert torch.equal(model.weight.grad, before)  # type: ignore[arg-type]


def test_accelerator_context_helpers_are_context_managers() -> None:
    accelerator = Accelerator(cpu=True)
    assert isinstance(accelerator.maybe_context_parallel(), contextlib.AbstractContextManager)


@pytest.mark.parametrize(
    "fact",
    ["num_processes", "process_index", "local_process_index", "is_main_process", "is_local_main_process",
     "is_last_process", "use_distributed", "device"],
)  # fmt: skip
def test_process_facts_read_the_accelerator_state(fact: str) -> None:
    """As upstream's, they read ``accelerator.state``: after its reset they raise the reset's error."""
    accelerator = Accelerator(cpu=True)
    assert getattr(accelerator, fact) == getattr(accelerator.state, fact)
    accelerator.state._reset_state()
    with pytest.raises(AttributeError, match=r"`AcceleratorState` object has no attribute.*This happens if"):
        getattr(accelerator, fact)
    accelerator.state.someotherthing = "MyValue"
    assert accelerator.state.someotherthing == "MyValue"
