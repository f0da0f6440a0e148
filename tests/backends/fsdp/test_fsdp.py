"""FSDP2 training on 2 gloo CPU processes, compared with the same training in one process.

Every rank function is top-level (the shared pool sends it by name) and returns plain data.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator
from accelerate.utils import FullyShardedDataParallelPlugin
from tests.backends.fsdp.fsdp_models import Block, TiedNet, dataset, make_model, reference_run
from tests.helpers.pool import WorkerPool

STEPS, ACCUM, PER_RANK, MAX_NORM = 3, 2, 4, 0.5


def _train(
    plugin_kwargs: dict[str, Any], *, separate: bool = False, mixed_precision: str | None = None
) -> dict[str, Any]:
    from torch.distributed.tensor import DTensor

    accelerator = Accelerator(
        fsdp_plugin=FullyShardedDataParallelPlugin(**plugin_kwargs),
        gradient_accumulation_steps=ACCUM,
        mixed_precision=mixed_precision,
    )
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = dataset(STEPS * ACCUM * PER_RANK * accelerator.num_processes)
    loader = DataLoader(TensorDataset(x, y), batch_size=PER_RANK)
    if separate:  # the optimizer prepared in a later call still finds the shards
        model = accelerator.prepare(model)
        optimizer, loader = accelerator.prepare(optimizer, loader)
    else:
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    seen_dtypes: set[torch.dtype] = set()
    model.blocks[0].fc1.register_forward_hook(lambda m, args, out: seen_dtypes.add(out.dtype))
    norms, losses, unsynced = [], [], []
    for xb, yb in loader:
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(xb), yb)
            losses.append(float(loss.detach()))
            accelerator.backward(loss)
            if not accelerator.sync_gradients:
                # No reduce-scatter on this step: the gradients wait unsharded inside FSDP.
                unsynced.append(all(p.grad is None for p in model.parameters()))
            if accelerator.sync_gradients:
                norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
            optimizer.step()
            optimizer.zero_grad()
    params = list(model.parameters())
    return {
        "state": accelerator.get_state_dict(model),
        "norms": norms,
        "unsynced": unsynced,
        "losses": losses,
        "local": sum(p.to_local().numel() for p in params if isinstance(p, DTensor)),
        "total": sum(p.numel() for p in params),
        "all_dtensor": all(isinstance(p, DTensor) for p in params),
        "param_dtypes": sorted({str(p.dtype) for p in params}),
        "compute_dtypes": sorted(str(d) for d in seen_dtypes),
        "optimizer_on_shards": all(
            p in {id(q) for q in params} for p in map(id, optimizer.param_groups[0]["params"])
        ),
        "describe": accelerator.strategy.describe(),  # type: ignore[attr-defined]
        "type": accelerator.distributed_type.value,
        "is_fsdp2": accelerator.is_fsdp2 and accelerator.state.is_fsdp2,
        "state_dict_type": accelerator.state.fsdp_plugin.state_dict_type,
        "scaler": accelerator.scaler is not None,
        "ranks": (accelerator.data_parallel_rank, accelerator.data_parallel_shard_rank),
        "multi_device": accelerator.multi_device,
    }


WRAP = {"auto_wrap_policy": "transformer_based_wrap", "transformer_cls_names_to_wrap": ["Block"]}
CASES = {
    "fsdp2-transformer-wrap": ({"fsdp_version": 2, **WRAP}, False, "shard", "[dp_shard=2]"),
    "fsdp2-size-wrap-separate-prepare": (
        {"fsdp_version": 2, "auto_wrap_policy": "size_based_wrap", "min_num_params": 500},
        True,
        "shard",
        "dp_shard=2",
    ),
    "fsdp2-checkpointed-blocks": (
        {"fsdp_version": 2, "activation_checkpointing": True, **WRAP},
        False,
        "shard",
        "",
    ),
    "fsdp1-shard-grad-op-no-wrap": (
        {"sharding_strategy": "SHARD_GRAD_OP"},
        False,
        "shard",
        "reshard_after_forward=False",
    ),
    "fsdp1-no-shard": (
        {"sharding_strategy": "NO_SHARD", **WRAP},
        False,
        "replicate",
        "dp_replicate=2 x dp_shard=1",
    ),
    "fsdp1-hybrid": (
        {"sharding_strategy": "HYBRID_SHARD", **WRAP},
        False,
        "hybrid",
        "dp_replicate=1 x dp_shard=2",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fsdp_trains_to_the_one_process_parameters(pool2: WorkerPool, case: str) -> None:
    plugin_kwargs, separate, layout, described = CASES[case]
    ranks = pool2.run(_train, plugin_kwargs, separate=separate)
    expected_state, expected_norms = reference_run(STEPS, ACCUM, 2 * PER_RANK, MAX_NORM)
    main, other = ranks
    assert other["state"] == {}, "the full state is gathered on the main process only"
    assert set(main["state"]) == set(expected_state)
    for name, value in expected_state.items():
        torch.testing.assert_close(main["state"][name], value, rtol=1e-5, atol=1e-6, msg=name)
    for rank in ranks:
        # clip_grad_norm_ returns the norm over every rank's shards: the one-process norm.
        assert rank["norms"] == pytest.approx(expected_norms, rel=1e-5)
        assert rank["all_dtensor"] and rank["optimizer_on_shards"] and rank["is_fsdp2"]
        assert rank["unsynced"] == [True] * STEPS * (ACCUM - 1)  # accumulate() skipped the gradient sync
        assert rank["type"] == "FSDP" and described in rank["describe"]
    # Ranks in the mesh: replicas hold whole copies (NO_SHARD), shards split one (full and hybrid
    # sharding, one node here); upstream's multi_device is False under FSDP (its type is FSDP).
    assert [r["ranks"] for r in ranks] == ([(0, 0), (1, 0)] if layout == "replicate" else [(0, 0), (0, 1)])
    assert not any(r["multi_device"] for r in ranks)
    if layout == "replicate":
        assert [r["local"] for r in ranks] == [main["total"]] * 2
    else:  # each rank holds about half of the parameters
        assert sum(r["local"] for r in ranks) == main["total"]
        assert all(0.4 < r["local"] / r["total"] < 0.6 for r in ranks)
    assert main["state_dict_type"] == (
        "SHARDED_STATE_DICT" if plugin_kwargs.get("fsdp_version") == 2 else "FULL_STATE_DICT"
    )


def test_bf16_policy_computes_in_bf16_and_trains(pool2: WorkerPool) -> None:
    ranks = pool2.run(_train, {"fsdp_version": 2, **WRAP}, mixed_precision="bf16")
    for rank in ranks:
        assert rank["param_dtypes"] == ["torch.float32"]  # the sharded master weights stay fp32
        assert rank["compute_dtypes"] == ["torch.bfloat16"]
        assert rank["losses"][-1] < rank["losses"][0]
    expected_state, _ = reference_run(STEPS, ACCUM, 2 * PER_RANK, MAX_NORM)
    state = ranks[0]["state"]
    assert all(torch.isfinite(v).all() for v in state.values())
    # bf16 compute lands near, not on, the fp32 result.
    torch.testing.assert_close(state["head.weight"], expected_state["head.weight"], rtol=0.1, atol=0.05)


def _ram_efficient_loading() -> dict[str, Any]:
    from accelerate import init_empty_weights
    from accelerate.state import PartialState

    rank = PartialState().process_index
    if rank == 0:
        model = make_model()
    else:
        with init_empty_weights():
            model = make_model(seed=123)
    on_meta = any(p.is_meta for p in model.parameters())
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_ram_efficient_loading=True, **WRAP)
    accelerator = Accelerator(fsdp_plugin=plugin)
    model = accelerator.prepare(model)
    out = model(torch.ones(2, 8)).detach()
    return {
        "on_meta": on_meta,
        "out": out,
        "state": accelerator.get_state_dict(model),
        "sync": plugin.sync_module_states,
    }


def test_cpu_ram_efficient_loading_broadcasts_rank0_weights(pool2: WorkerPool) -> None:
    main, other = pool2.run(_ram_efficient_loading)
    assert not main["on_meta"] and other["on_meta"] and main["sync"]
    expected = make_model().state_dict()
    for name, value in expected.items():
        torch.testing.assert_close(main["state"][name], value, msg=name)
    torch.testing.assert_close(main["out"], other["out"])
    torch.testing.assert_close(main["out"], make_model()(torch.ones(2, 8)).detach())


def _tied_ram_efficient_training() -> dict[str, Any]:
    from accelerate import init_empty_weights
    from accelerate.state import PartialState

    torch.manual_seed(0)
    if PartialState().process_index == 0:
        model = TiedNet()
    else:
        with init_empty_weights():
            model = TiedNet()
    accelerator = Accelerator(
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2, cpu_ram_efficient_loading=True)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    tokens = torch.arange(8).view(2, 4)
    accelerator.backward(model(tokens).float().pow(2).mean())
    optimizer.step()
    return {"tied": model.out.weight is model.embed.weight, "state": accelerator.get_state_dict(model)}


def test_tied_weights_stay_tied_through_rank0_loading(pool2: WorkerPool) -> None:
    main, other = pool2.run(_tied_ram_efficient_training)
    assert main["tied"] and other["tied"]
    torch.manual_seed(0)
    reference = TiedNet()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    # Both ranks ran the same tokens: the averaged gradient is the one-process gradient.
    reference(torch.arange(8).view(2, 4)).pow(2).mean().backward()
    optimizer.step()
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(main["state"][name], value, msg=name)


def _bad_inputs() -> list[str]:
    messages = []
    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    model = accelerator.prepare(make_model())
    stranger = torch.nn.Linear(2, 2)
    try:
        accelerator.prepare(torch.optim.SGD([*model.parameters(), *stranger.parameters()], lr=0.1))
    except ValueError as exc:
        messages.append(str(exc))
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["GPT2Block"])  # fmt: skip
    try:
        Accelerator(fsdp_plugin=plugin).prepare(make_model())
    except ValueError as exc:
        messages.append(str(exc))
    return messages


def test_bad_inputs_are_refused_by_name(pool2: WorkerPool) -> None:
    for optimizer_error, wrap_error in pool2.run(_bad_inputs):
        assert "2 parameter(s) that belong to no model prepared with FSDP" in optimizer_error
        assert (
            "GPT2Block" in wrap_error
            and "TinyTransformer, Linear, ModuleList, Block, LayerNorm" in wrap_error
        )


def _fp16_with_scaler() -> dict[str, Any]:
    # The scaler unscales DTensor gradients (torch reduces found_inf over the mesh, so ranks skip together).
    return _train({"fsdp_version": 2, **WRAP}, mixed_precision="fp16")


def test_fp16_with_a_scaler_on_sharded_gradients(pool2: WorkerPool) -> None:
    for rank in pool2.run(_fp16_with_scaler):
        assert rank["scaler"] and rank["compute_dtypes"] == ["torch.float16"]
        assert rank["losses"][-1] < rank["losses"][0]
        assert all(torch.isfinite(v).all() for v in rank["state"].values())


def test_fsdp_and_deepspeed_together_are_refused() -> None:
    with pytest.raises(ValueError, match="both fsdp_plugin .FSDP. and deepspeed_plugin .DeepSpeed."):
        Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(), deepspeed_plugin=object())


def test_cpu_offload_without_a_gpu_is_refused() -> None:
    from accelerate.backends.fsdp.strategy import FSDPStrategy

    if torch.cuda.is_available():
        pytest.skip("CPU offload runs on a GPU machine")
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, cpu_offload=True)
    with pytest.raises(ValueError, match="cpu_offload=True.*no GPU is available"):
        FSDPStrategy(
            torch.device("cpu"), plugin, mixed_precision="no", num_processes=2, num_processes_per_node=2
        )


def test_one_process_keeps_the_plugin_and_runs_unsharded() -> None:
    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2))
    model = accelerator.prepare(make_model())
    assert accelerator.state.fsdp_plugin.state_dict_type == "SHARDED_STATE_DICT"
    assert isinstance(model.blocks[0], Block)


def _fsdp2_regional_compilation() -> dict[str, Any]:
    from torch.distributed.fsdp import FSDPModule

    from accelerate.utils import TorchDynamoPlugin

    accelerator = Accelerator(
        fsdp_plugin=FullyShardedDataParallelPlugin(fsdp_version=2, **WRAP),
        dynamo_plugin=TorchDynamoPlugin(backend="eager", use_regional_compilation=True),
    )
    original = make_model()
    model = accelerator.prepare(original)
    x, y = dataset(4)
    loss = F.mse_loss(model(x), y)
    accelerator.backward(loss)
    return {
        "same_object": model is original,  # in place: no compiled copy for fully_shard to miss
        "root_sharded": isinstance(model, FSDPModule),
        "blocks_sharded": all(isinstance(block, FSDPModule) for block in model.blocks),
        "blocks_compiled": all(block._compiled_call_impl is not None for block in model.blocks),
        "grads": all(p.grad is not None for p in model.parameters()),
    }


def test_fsdp2_regional_compilation_compiles_the_sharded_blocks_in_place(pool2: WorkerPool) -> None:
    # As upstream: under FSDP2, TorchDynamoPlugin(use_regional_compilation=True) compiles each block in place
    # after fully_shard (compile_regions_fsdp2), so the blocks keep their all-gather/reshard hooks.
    for rank in pool2.run(_fsdp2_regional_compilation, timeout=120):
        assert rank == dict.fromkeys(rank, True)
