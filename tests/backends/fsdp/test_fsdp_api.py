"""accelerate.utils.fsdp_utils's engine helpers (the checkpoint helpers are tested with checkpoints)."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from accelerate import Accelerator
from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin
from accelerate.backends.fsdp.spec import resolve_fsdp_plugin
from accelerate.config.env import read_launch_env
from accelerate.utils import fsdp_utils
from tests.backends.fsdp.fsdp_models import make_model


def test_ram_efficient_loading_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACCELERATE_USE_FSDP", "FSDP_CPU_RAM_EFFICIENT_LOADING"):
        monkeypatch.setenv(name, "")  # records the variable's state, restored after the test
        monkeypatch.delenv(name)
    fsdp_utils.enable_fsdp_ram_efficient_loading()
    assert (
        os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "true" and os.environ["ACCELERATE_USE_FSDP"] == "true"
    )
    # The switches speak to the next Accelerator: its run resolution reads them (the plugin reads no env).
    assert resolve_fsdp_plugin(None, read_launch_env()).cpu_ram_efficient_loading
    assert resolve_fsdp_plugin(FullyShardedDataParallelPlugin(), read_launch_env()).cpu_ram_efficient_loading
    fsdp_utils.disable_fsdp_ram_efficient_loading()
    assert not resolve_fsdp_plugin(None, read_launch_env()).cpu_ram_efficient_loading


def test_auto_wrap_policy_predicate() -> None:
    model = make_model()
    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"]
    )
    predicate = fsdp_utils.fsdp2_prepare_auto_wrap_policy(plugin, model)
    assert [predicate(m) for m in (model.blocks[0], model.head, model)] == [True, False, False]
    assert fsdp_utils.get_module_class_from_name(model, "Block") is type(model.blocks[0])


def test_switch_optimizer_parameters_by_data_pointer() -> None:
    old, new = make_model(), make_model(seed=1)
    optimizer = torch.optim.SGD(old.parameters(), lr=0.1)
    mapping = {a.data_ptr(): b for a, b in zip(old.parameters(), new.parameters(), strict=True)}
    fsdp_utils.fsdp2_switch_optimizer_parameters(optimizer, mapping)
    assert all(a is b for a, b in zip(optimizer.param_groups[0]["params"], new.parameters(), strict=True))
    with pytest.raises(ValueError, match="not in the mapping"):
        fsdp_utils.fsdp2_switch_optimizer_parameters(torch.optim.SGD(old.parameters(), lr=0.1), {})


def test_names_modules_and_scaler() -> None:
    names = {"blocks.0._checkpoint_wrapped_module.fc1.weight": 1, "_orig_mod.head.bias": 2}
    assert fsdp_utils.fsdp2_canonicalize_names(names) == {"blocks.0.fc1.weight": 1, "head.bias": 2}
    model = make_model()
    params = fsdp_utils.get_parameters_from_modules(r"blocks\.[01]", model, "cpu")
    assert params == {*model.blocks[0].parameters(), *model.blocks[1].parameters()}
    assert fsdp_utils.get_parameters_from_modules(None, model, "cpu") == set()
    Accelerator(cpu=True)
    assert isinstance(fsdp_utils.get_fsdp2_grad_scaler(init_scale=4.0), torch.amp.GradScaler)


def test_ensure_weights_retied() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.out = nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)
            self.out.weight = self.embed.weight

    def init(module: nn.Module) -> None:  # an init that breaks the tie, as to_empty-style inits do
        for child in (module.embed, module.out):
            child.weight = nn.Parameter(torch.zeros(4, 4))

    model = Tied()
    fsdp_utils.ensure_weights_retied(init, model, "cpu")(model)
    assert model.out.weight is model.embed.weight
    assert fsdp_utils.ensure_weights_retied(None, model, "cpu") is None


def test_prepare_model_needs_an_fsdp_accelerator() -> None:
    with pytest.raises(ValueError, match="fsdp2_prepare_model needs an Accelerator running FSDP"):
        fsdp_utils.fsdp2_prepare_model(Accelerator(cpu=True), make_model())
