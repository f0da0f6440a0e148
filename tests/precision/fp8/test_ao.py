"""fp8 training through torchao on CPU: conversion, the loss against bf16, checkpoints, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from accelerate import Accelerator
from accelerate.precision.fp8.ao import filter_first_and_last_linear_layers, has_ao_layers
from accelerate.utils import AORecipeKwargs
from tests.precision.fp8.models import dataset, make_model

pytest.importorskip("torchao")
from torchao.float8.float8_linear import Float8Linear  # noqa: E402 - after the skip


def _float8_names(model: nn.Module) -> list[str]:
    return sorted(name for name, module in model.named_modules() if isinstance(module, Float8Linear))


def _train(
    accelerator: Accelerator, model: nn.Module, optimizer: Any, x: torch.Tensor, y: torch.Tensor, steps: int
) -> list[float]:
    losses = []
    for step in range(steps):
        xb, yb = x[step * 16 % len(x) :][:16], y[step * 16 % len(y) :][:16]
        loss = F.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def test_prepare_converts_the_eligible_linears_and_autocasts_the_rest_in_bf16() -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])
    model = accelerator.prepare(make_model())
    assert _float8_names(model) == ["blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2"]
    assert type(model.inp) is nn.Linear and type(model.out) is nn.Linear  # first and last stay
    assert (
        accelerator.fp8_backend == "AO" and accelerator.mixed_precision == "fp8" and accelerator.fp8_enabled
    )
    assert accelerator.has_fp8_handler and isinstance(accelerator.ao_recipe_handler, AORecipeKwargs)
    assert accelerator.te_recipe_handler is None and accelerator.unwrap_model(model) is model
    seen: list[torch.dtype] = []
    model.inp.register_forward_hook(lambda m, args, out: seen.append(out.dtype))
    assert model(torch.randn(2, 8)).dtype == torch.float32  # outputs come back in fp32, as with bf16
    assert seen == [torch.bfloat16]  # the unconverted layers run under bf16 autocast (upstream's choice)


def test_no_handler_picks_torchao_and_a_user_filter_decides() -> None:
    accelerator = Accelerator(mixed_precision="fp8")  # no recipe: torchao is what runs on this machine
    assert accelerator.fp8_backend == "AO" and not accelerator.has_fp8_handler
    assert _float8_names(accelerator.prepare(make_model())) == ["blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2"]  # fmt: skip

    def only_fc1(module: nn.Module, fqn: str) -> bool:
        return not isinstance(module, nn.Linear) or fqn.endswith("fc1")

    accelerator = Accelerator(
        mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs(module_filter_func=only_fc1)]
    )
    assert _float8_names(accelerator.prepare(make_model())) == ["blocks.0.fc1", "blocks.1.fc1"]


def test_the_launcher_variables_choose_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp8")
    monkeypatch.setenv("ACCELERATE_FP8_BACKEND", "AO")
    monkeypatch.setenv("ACCELERATE_FP8_PAD_INNER_DIM", "true")
    accelerator = Accelerator()
    assert accelerator.mixed_precision == "fp8" and accelerator.fp8_backend == "AO"
    assert accelerator.ao_recipe_handler.pad_inner_dim is True
    assert has_ao_layers(accelerator.prepare(make_model()))


def test_fifty_steps_reduce_the_loss_like_bf16() -> None:
    x, y = dataset(256)
    finals = {}
    for mode in ("bf16", "fp8"):
        accelerator = Accelerator(mixed_precision=mode)
        model = make_model()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        model, optimizer = accelerator.prepare(model, optimizer)
        losses = _train(accelerator, model, optimizer, x, y, 50)
        assert sum(losses[-5:]) < 0.5 * sum(losses[:5]), (mode, losses)
        finals[mode] = sum(losses[-5:]) / 5
        accelerator.free_memory()
        from accelerate.state import reset_state

        reset_state()  # the next mode is a new run in this process
    assert finals["fp8"] == pytest.approx(finals["bf16"], rel=0.10), finals


def test_checkpoint_round_trip_continues_identically(tmp_path: Path) -> None:
    x, y = dataset(128)

    def fresh() -> tuple[Accelerator, nn.Module, Any]:
        accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])
        model = make_model(seed=5)  # different start: the load must bring the weights back
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model, optimizer = accelerator.prepare(model, optimizer)
        return accelerator, model, optimizer

    accelerator, model, optimizer = fresh()
    _train(accelerator, model, optimizer, x, y, 4)
    accelerator.save_state(str(tmp_path / "state"))
    accelerator.save_model(model, str(tmp_path / "model"))
    expected = _train(accelerator, model, optimizer, x, y, 4)

    accelerator, model, optimizer = fresh()
    accelerator.load_state(str(tmp_path / "state"))
    assert (
        _train(accelerator, model, optimizer, x, y, 4) == expected
    )  # float8 scales are dynamic: same inputs, same steps
    # save_model wrote ordinary weights: they load into the unconverted model.
    from safetensors.torch import load_file

    plain = make_model()
    plain.load_state_dict(load_file(str(tmp_path / "model" / "model.safetensors")))


def test_a_model_without_an_eligible_linear_is_named() -> None:
    accelerator = Accelerator(mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs()])
    tiny = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 4))
    with pytest.raises(
        ValueError, match=r"converted no layer of Sequential: the default filter .*0 \(8x12\), 2 \(12x4\)"
    ):
        accelerator.prepare(tiny)

    def nothing(module: nn.Module, fqn: str) -> bool:
        return False

    accelerator = Accelerator(
        mixed_precision="fp8", kwargs_handlers=[AORecipeKwargs(module_filter_func=nothing)]
    )
    with pytest.raises(
        ValueError, match=r"module_filter_func='nothing' left none .*blocks\.0\.fc1 \(64x64\)"
    ):
        accelerator.prepare(make_model())


def test_the_filters_at_upstreams_path() -> None:
    import accelerate.utils.ao as face

    model = make_model()
    assert face.filter_first_and_last_linear_layers is filter_first_and_last_linear_layers
    assert face.find_first_last_linear_layers(model) == ("inp", "out")
    assert not face.filter_linear_layers(nn.Linear(8, 12), "x", layers_to_filter=[])
    assert face.filter_linear_layers(nn.Linear(16, 32), "x", layers_to_filter=[])
    converted = face.convert_model_to_fp8_ao(make_model())
    assert _float8_names(converted) == ["blocks.0.fc1", "blocks.0.fc2", "blocks.1.fc1", "blocks.1.fc2"]
