"""fp8 (torchao) on 2 gloo CPU processes, DDP and FSDP2, against the same training in one process.

One shared pool of 2 workers serves both checks (spawning groups is slow). Each rank trains on its
own quarter-batches with gradient accumulation and clipping; the one-process run accumulates the
same quarter-batches (in rank order) over twice the steps, so every float8 scale is computed from
the same tensors and the runs agree up to summation order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from accelerate import Accelerator
from accelerate.utils import AORecipeKwargs, FullyShardedDataParallelPlugin
from tests.helpers.pool import WorkerPool
from tests.precision.fp8.models import dataset, make_model, plain_state

STEPS, ACCUM, MICRO, MAX_NORM = 3, 2, 4, 0.5


def _train(kind: str, world: int) -> dict[str, Any]:
    """Trains on this process's micro-batches; ``world`` is the number of ranks the data is split for."""
    from torchao.float8.float8_linear import Float8Linear
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    plugin = None
    if kind == "fsdp2":
        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"]
        )
    # One process stands in for all ranks: it accumulates every rank's micro-batches.
    accumulation = ACCUM * (world if kind == "single" else 1)
    accelerator = Accelerator(
        mixed_precision="fp8", fsdp_plugin=plugin, gradient_accumulation_steps=accumulation,
        kwargs_handlers=[AORecipeKwargs()],
    )  # fmt: skip
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = dataset(STEPS * ACCUM * world * MICRO)
    ranks = range(world) if kind == "single" else [accelerator.process_index]
    norms = []
    for step in range(STEPS):
        for micro in range(ACCUM):
            for rank in ranks:
                start = ((step * ACCUM + micro) * world + rank) * MICRO
                with accelerator.accumulate(model):
                    loss = F.mse_loss(model(x[start : start + MICRO]), y[start : start + MICRO])
                    accelerator.backward(loss)
                    if accelerator.sync_gradients:
                        norms.append(float(accelerator.clip_grad_norm_(model.parameters(), MAX_NORM)))
                    optimizer.step()
                    optimizer.zero_grad()
    inner = accelerator.unwrap_model(model)
    weight = inner.get_submodule("blocks.0.fc1").weight
    local = getattr(weight, "_local_tensor", weight)
    return {
        "state": plain_state(accelerator.get_state_dict(model)),
        "norms": norms,
        "float8_layers": sorted(n for n, m in inner.named_modules() if isinstance(m, Float8Linear)),
        "float8_all_gather": isinstance(local, WeightWithDynamicFloat8CastTensor),
        "backend": accelerator.fp8_backend.value,
    }


@pytest.mark.parametrize("kind", ["ddp", "fsdp2"])
def test_two_processes_match_one(pool2: WorkerPool, kind: str) -> None:
    expected = _train("single", world=2)
    main, other = pool2.run(_train, kind, 2)
    assert expected["float8_layers"] == ["blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2"]
    for rank in (main, other):
        assert rank["float8_layers"] == expected["float8_layers"] and rank["backend"] == "AO"
        assert rank["norms"] == pytest.approx(expected["norms"], rel=1e-4)
        # FSDP2 all-gathers the float8 layers' weights in float8 (torchao's option, on by default there).
        assert rank["float8_all_gather"] is (kind == "fsdp2")
    assert set(main["state"]) == set(expected["state"])
    for name, value in expected["state"].items():
        torch.testing.assert_close(main["state"][name], value, rtol=1e-4, atol=1e-5, msg=name)


def _fsdp2_checkpoint_round_trip(path: str) -> dict[str, Any]:
    """Trains 2 steps, saves, trains 2 more; a fresh run (other initial weights) loads and trains 2."""
    x, y = dataset(64)

    def fresh(seed: int) -> tuple[Accelerator, Any, Any]:
        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"]
        )
        accelerator = Accelerator(
            mixed_precision="fp8", fsdp_plugin=plugin, kwargs_handlers=[AORecipeKwargs()]
        )
        model = make_model(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model, optimizer = accelerator.prepare(model, optimizer)
        return accelerator, model, optimizer

    def steps(accelerator: Accelerator, model: Any, optimizer: Any, n: int) -> list[float]:
        losses = []
        for i in range(n):
            start = (i * 2 + accelerator.process_index) * MICRO
            loss = F.mse_loss(model(x[start : start + MICRO]), y[start : start + MICRO])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(loss.detach()))
        return losses

    accelerator, model, optimizer = fresh(0)
    steps(accelerator, model, optimizer, 2)
    accelerator.save_state(path)
    expected = steps(accelerator, model, optimizer, 2)
    accelerator.save_model(model, f"{path}/model")
    accelerator, model, optimizer = fresh(3)
    accelerator.load_state(path)
    return {"expected": expected, "resumed": steps(accelerator, model, optimizer, 2)}


def test_fsdp2_checkpoint_round_trip_continues_identically(pool2: WorkerPool, tmp_path: Path) -> None:
    for rank in pool2.run(_fsdp2_checkpoint_round_trip, str(tmp_path / "ckpt")):
        assert rank["resumed"] == rank["expected"]
    # save_model gathered ordinary weights (float8 all-gather wrappers never reach the file).
    from safetensors.torch import load_file

    make_model().load_state_dict(load_file(str(tmp_path / "ckpt" / "model" / "model.safetensors")))
