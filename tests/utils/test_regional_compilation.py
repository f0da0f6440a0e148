"""Regional compilation through the Accelerator: ``TorchDynamoPlugin(use_regional_compilation=True)``, the
launcher's ``--dynamo_use_regional_compilation`` (environment contract) and checkpoints of such a model."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState, PartialState
from accelerate.utils import TorchDynamoPlugin, has_compiled_regions, is_compiled_module
from tests.helpers.pool import WorkerPool

COUNTING_BACKEND = "accelerate_test_counting"
_graphs: list[torch.fx.GraphModule] = []


def _counting_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    # Each call is one graph dynamo compiled; running it eagerly keeps the test quick.
    _graphs.append(gm)
    return gm.forward


def _register_counting_backend() -> None:
    from torch._dynamo import list_backends, register_backend

    if COUNTING_BACKEND not in list_backends(exclude_tags=()):
        register_backend(_counting_backend, name=COUNTING_BACKEND)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return x + torch.softmax(q @ k.transpose(-1, -2) / 8**0.5, dim=-1) @ v


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class TwoStacks(nn.Module):
    """Two lists of repeated blocks of two classes: regional compilation makes one graph per class."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.ModuleList([Attention() for _ in range(4)])
        self.mlp = nn.ModuleList([MLP() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.attention:
            x = block(x)
        for block in self.mlp:
            x = block(x)
        return x


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    for state in (AcceleratorState, GradientState, PartialState):
        state._reset_state()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    for state in (AcceleratorState, GradientState, PartialState):
        state._reset_state()


def test_each_block_class_is_compiled_once_and_outputs_match_eager() -> None:
    _register_counting_backend()
    _graphs.clear()
    torch.manual_seed(0)
    model = TwoStacks()
    reference = copy.deepcopy(model)
    plugin = TorchDynamoPlugin(backend=COUNTING_BACKEND, use_regional_compilation=True)
    accelerator = Accelerator(cpu=True, dynamo_plugin=plugin)
    prepared = accelerator.prepare(model)

    assert has_compiled_regions(prepared) and not is_compiled_module(prepared)
    assert all(is_compiled_module(block) for block in [*prepared.attention, *prepared.mlp])
    # As in a real model, the blocks' input requires grad (it would come from an embedding): a first block fed
    # a leaf without grad would be traced once more, as the guard on requires_grad differs.
    x = torch.randn(2, 5, 8, requires_grad=True)
    out = prepared(x)
    # Seven blocks, two classes: dynamo traced two graphs (whole-model compilation would trace one big one).
    assert len(_graphs) == 2
    torch.testing.assert_close(out, reference(x))
    # The blocks share their parameters with the user's model, and later calls reuse the graphs.
    out.sum().backward()
    reference(x).sum().backward()
    for (name, param), ref in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert param.grad is not None, name
        torch.testing.assert_close(param.grad, ref.grad, msg=name)
    prepared(torch.randn(2, 5, 8, requires_grad=True))
    assert len(_graphs) == 2


def test_inductor_regions_match_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real backend: C++ generated and built with gcc. Inference only, as building the backward kernels
    # too doubles the compile time; training through compiled regions is covered above.
    # Inductor exports this variable whenever it loads a kernel; set here, monkeypatch removes it afterwards.
    monkeypatch.setenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "0")
    torch.manual_seed(0)
    model = TwoStacks().eval()
    plugin = TorchDynamoPlugin(backend="inductor", use_regional_compilation=True)
    prepared = Accelerator(cpu=True, dynamo_plugin=plugin).prepare(model)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        torch.testing.assert_close(prepared(x), model(x), rtol=1e-5, atol=1e-5)


def test_launcher_setting_turns_regional_compilation_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # What `accelerate launch --dynamo_backend ... --dynamo_use_regional_compilation` exports to the script.
    _register_counting_backend()
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", COUNTING_BACKEND)
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "true")
    accelerator = Accelerator(cpu=True)
    assert accelerator.dynamo_plugin.use_regional_compilation is True
    prepared = accelerator.prepare(TwoStacks())
    assert has_compiled_regions(prepared) and not is_compiled_module(prepared)
    # The plugin's own value wins over the launcher's.
    for state in (AcceleratorState, GradientState, PartialState):
        state._reset_state()
    plugin = TorchDynamoPlugin(use_regional_compilation=False)
    whole = Accelerator(cpu=True, dynamo_plugin=plugin).prepare(TwoStacks())
    assert is_compiled_module(whole)


def test_checkpoints_and_unwrap_see_the_plain_model(tmp_path: Path) -> None:
    _register_counting_backend()
    plugin = TorchDynamoPlugin(backend=COUNTING_BACKEND, use_regional_compilation=True)
    accelerator = Accelerator(cpu=True, dynamo_plugin=plugin, mixed_precision="bf16")
    model = TwoStacks()
    prepared = accelerator.prepare(model)
    assert accelerator.unwrap_model(prepared, keep_torch_compile=False) is model
    assert accelerator.unwrap_model(prepared) is prepared  # keep_torch_compile=True keeps the compiled copy
    assert set(accelerator.get_state_dict(prepared)) == set(model.state_dict())
    accelerator.save_state(str(tmp_path / "ckpt"))
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    accelerator.load_state(str(tmp_path / "ckpt"))
    assert all(param.abs().sum() > 0 for param in model.parameters())
    # Under bf16 the copy's forward runs in autocast and returns fp32 (the wrapper sits on the copy).
    assert prepared(torch.randn(2, 5, 8)).dtype == torch.float32


def _ddp_regional_training(steps: int) -> dict[str, Any]:
    _register_counting_backend()
    _graphs.clear()
    torch._dynamo.reset()
    plugin = TorchDynamoPlugin(backend=COUNTING_BACKEND, use_regional_compilation=True)
    accelerator = Accelerator(cpu=True, dynamo_plugin=plugin)
    model = TwoStacks()  # same seed on both ranks: one starting point
    prepared, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    generator = torch.Generator().manual_seed(accelerator.process_index)  # different data per rank
    for _ in range(steps):
        x = torch.randn(2, 5, 8, generator=generator, requires_grad=True)
        accelerator.backward(prepared(x).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
    return {
        "wrapped": type(prepared).__name__,
        "graphs": len(_graphs),
        "sum": float(sum(p.detach().sum() for p in model.parameters())),
    }


def test_regions_under_ddp_on_two_processes(pool2: WorkerPool) -> None:
    r0, r1 = pool2.run(_ddp_regional_training, 2)
    assert r0["wrapped"] == "DistributedDataParallel"
    # DDP averaged the gradients of the compiled blocks: the ranks' weights agree.
    assert r0["sum"] == r1["sum"] and r0["graphs"] == r1["graphs"] == 2


class _EngineLike(nn.Module):
    """What DeepSpeed's engine (or DDP) looks like from outside: the model is its one child ``module``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


@pytest.mark.parametrize("variant", ["compile_regions_deepspeed", "compile_regions_fsdp2"])
def test_engine_variants_compile_each_block_in_place(variant: str) -> None:
    from accelerate import utils

    _register_counting_backend()
    _graphs.clear()
    torch.manual_seed(0)
    model = TwoStacks()
    reference = copy.deepcopy(model)
    hooked: list[int] = []
    model.attention[0].register_forward_pre_hook(lambda module, args: hooked.append(1))
    engine = _EngineLike(model)
    assert getattr(utils, variant)(engine, backend=COUNTING_BACKEND) is None
    # In place: the same objects, no OptimizedModule wrapper, every block compiled on its own.
    assert engine.module is model and not has_compiled_regions(engine)
    assert all(block._compiled_call_impl is not None for block in [*model.attention, *model.mlp])
    assert model._compiled_call_impl is None and engine._compiled_call_impl is None
    x = torch.randn(2, 5, 8, requires_grad=True)
    torch.testing.assert_close(engine(x), reference(x))
    assert len(_graphs) == 2 and hooked == [1]  # one graph per block class; hooks on the blocks still run


@pytest.mark.parametrize("variant", ["compile_regions_deepspeed", "compile_regions_fsdp2"])
def test_engine_variants_compile_a_model_without_blocks_whole(variant: str) -> None:
    from accelerate import utils

    model = nn.Linear(3, 3)
    engine = _EngineLike(model)
    getattr(utils, variant)(engine, backend="eager")
    assert model._compiled_call_impl is not None and engine._compiled_call_impl is None
    torch.testing.assert_close(engine(torch.ones(1, 3)), model.forward(torch.ones(1, 3)))
