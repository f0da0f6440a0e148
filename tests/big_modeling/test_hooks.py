from __future__ import annotations

from typing import Any

import torch
from torch import nn

from accelerate.hooks import (
    AlignDevicesHook,
    LayerwiseCastingHook,
    ModelHook,
    SequentialHook,
    add_hook_to_module,
    attach_align_device_hook,
    attach_layerwise_casting_hooks,
    remove_hook_from_module,
    remove_hook_from_submodules,
)


class AddOne(ModelHook):
    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (args[0] + 1,), kwargs


class Double(ModelHook):
    def post_forward(self, module: nn.Module, output: Any) -> Any:
        return output * 2


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2)).eval()


def test_hook_wraps_forward_and_removal_restores_the_class_forward() -> None:
    layer = nn.Linear(2, 2)
    x = torch.randn(3, 2)
    add_hook_to_module(layer, AddOne())
    assert torch.equal(layer(x), nn.functional.linear(x + 1, layer.weight, layer.bias))
    assert layer.forward.__name__ == "forward"  # wrapper keeps the name/signature
    remove_hook_from_module(layer)
    assert (
        "forward" not in vars(layer) and not hasattr(layer, "_hf_hook") and not hasattr(layer, "_old_forward")
    )
    assert torch.equal(layer(x), nn.functional.linear(x, layer.weight, layer.bias))


def test_removal_restores_an_instance_forward() -> None:
    layer = nn.Linear(2, 2)

    def custom(x: torch.Tensor) -> torch.Tensor:
        return x * 0

    layer.forward = custom  # type: ignore[method-assign]
    add_hook_to_module(layer, Double())
    remove_hook_from_module(layer)
    assert layer.forward is custom


def test_replacing_and_appending_hooks() -> None:
    layer = nn.Linear(2, 2)
    x = torch.randn(1, 2)
    plain = layer(x)
    add_hook_to_module(layer, Double())
    add_hook_to_module(layer, Double())  # replaces: still doubled once
    assert torch.allclose(layer(x), plain * 2)
    add_hook_to_module(layer, Double(), append=True)
    assert isinstance(layer._hf_hook, SequentialHook) and len(layer._hf_hook.hooks) == 2
    assert torch.allclose(layer(x), plain * 4)
    remove_hook_from_module(layer)
    assert torch.equal(layer(x), plain)


def test_no_grad_hook() -> None:
    class NoGrad(ModelHook):
        no_grad = True

    layer = add_hook_to_module(nn.Linear(2, 2), NoGrad())
    assert not layer(torch.randn(1, 2)).requires_grad


def test_recursive_removal() -> None:
    model = _mlp()
    for sub in model:
        add_hook_to_module(sub, Double())
    remove_hook_from_module(model, recurse=True)
    assert not any(hasattr(sub, "_hf_hook") for sub in model.modules())
    model2 = _mlp()
    add_hook_to_module(model2[0], Double())
    remove_hook_from_submodules(model2)
    assert not hasattr(model2[0], "_hf_hook")


def test_offload_hooks_keep_outputs_and_free_weights() -> None:
    model = _mlp()
    x = torch.randn(5, 3)
    expected = model(x)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    attach_align_device_hook(model, execution_device="cpu", offload=True, weights_map=weights)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert model[1].running_mean.device.type == "cpu"  # buffers stay unless offload_buffers
    assert torch.equal(model(x), expected)
    assert all(p.device.type == "meta" for p in model.parameters())  # released after forward
    remove_hook_from_submodules(model)
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert torch.equal(model(x), expected)


def test_offload_buffers_too() -> None:
    model = _mlp()
    x = torch.randn(5, 3)
    expected = model(x)
    attach_align_device_hook(model, execution_device="cpu", offload=True, offload_buffers=True)
    assert model[1].running_mean.device.type == "meta"
    assert torch.equal(model(x), expected)


def test_io_same_device_and_skip_keys() -> None:
    seen: dict[str, torch.device] = {}

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
            seen["x"], seen["extra"] = x.device, extra.device
            return {"out": torch.zeros(2, device=x.device), "extra": extra}

    module = add_hook_to_module(Probe(), AlignDevicesHook(execution_device="meta", skip_keys="extra"))
    module(torch.ones(2), extra=torch.ones(2))
    assert seen == {"x": torch.device("meta"), "extra": torch.device("cpu")}
    # io_same_device: the output goes back to where the inputs were (only CPU here, so the input device
    # recorded by pre_forward is set by hand to a different one).
    hook = AlignDevicesHook(io_same_device=True, skip_keys="keep")
    hook.pre_forward(module, torch.ones(1))
    assert hook.input_device == torch.device("cpu")
    hook.input_device = torch.device("meta")
    out = hook.post_forward(module, {"moved": torch.ones(1), "keep": torch.ones(1)})
    assert out["moved"].device.type == "meta" and out["keep"].device.type == "cpu"


def test_layerwise_casting_computes_in_wide_dtype() -> None:
    model = _mlp()
    x = torch.randn(5, 3)
    stored = model(x)
    attach_layerwise_casting_hooks(
        model, torch.bfloat16, torch.float32, skip_modules_classes=(nn.BatchNorm1d,)
    )
    assert model[0].weight.dtype == torch.bfloat16 and model[1].weight.dtype == torch.float32
    assert isinstance(model[0]._hf_hook, LayerwiseCastingHook)
    out = model(x)
    assert out.dtype == torch.float32 and model[3].weight.dtype == torch.bfloat16
    assert torch.allclose(out, stored, atol=0.1)
    patterned = _mlp()
    attach_layerwise_casting_hooks(patterned, torch.bfloat16, torch.float32, skip_modules_pattern=["^3$"])
    assert patterned[3].weight.dtype == torch.float32 and patterned[0].weight.dtype == torch.bfloat16


class _Scaled(nn.Module):
    """A layer holding a bare parameter of its own, as many custom layers (and RMSNorm) do."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


def test_layerwise_casting_leaves_layers_other_than_linear_and_conv_as_they_are() -> None:
    # Upstream casts only Linear and Conv/ConvTranspose (1d-3d) layers; normalisation layers,
    # embeddings and any other layer keep their dtype without a skip pattern or class.
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Embedding(10, 4), nn.LayerNorm(4), _Scaled(), nn.Linear(4, 4), nn.GroupNorm(2, 4)
    ).eval()
    conv = nn.Sequential(nn.Conv1d(2, 4, 1), nn.BatchNorm1d(4), nn.ConvTranspose1d(4, 2, 1)).eval()
    ids, signal = torch.tensor([[1, 2], [3, 4]]), torch.randn(2, 2, 3)
    expected = (model[:4](ids), conv(signal))
    attach_layerwise_casting_hooks(model, torch.bfloat16, torch.float32)
    attach_layerwise_casting_hooks(conv, torch.bfloat16, torch.float32)
    kept = [
        model[0].weight,
        model[1].weight,
        model[2].gain,
        model[4].weight,
        conv[1].weight,
        conv[1].running_mean,
    ]
    assert all(t.dtype == torch.float32 for t in kept)
    assert [m.weight.dtype for m in (model[3], conv[0], conv[2])] == [torch.bfloat16] * 3
    assert not hasattr(model[1], "_hf_hook") and not hasattr(model, "_hf_hook")
    out = (model[:4](ids), conv(signal))
    assert all(o.dtype == torch.float32 and torch.allclose(o, e, atol=0.1) for o, e in zip(out, expected))


def test_an_offload_hook_moved_to_another_module_releases_that_module() -> None:
    # transformers re-attaches an embedding's hook to the resized embedding (resize_token_embeddings).
    first, second = nn.Linear(3, 3), nn.Linear(3, 3)
    second.load_state_dict(first.state_dict())
    x = torch.randn(2, 3)
    expected = first(x)
    hook = AlignDevicesHook(execution_device="cpu", offload=True)
    add_hook_to_module(first, hook)
    assert torch.equal(first(x), expected)
    remove_hook_from_module(first)
    add_hook_to_module(second, hook)
    assert torch.equal(second(x), expected)
    assert second.weight.device.type == "meta"  # released after forward, like the first module was
