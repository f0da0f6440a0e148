"""`accelerate.utils.other`: the names upstream has there, tested on their real behaviour."""

from __future__ import annotations

import io
import logging
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from accelerate.state import PartialState
from accelerate.utils import other
from accelerate.utils.kernel_check import _kernel_version
from tests.helpers.pool import WorkerPool


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class Tower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# --- repeated blocks and regional compilation ---------------------------------------------------------
def test_repeated_blocks_are_found() -> None:
    tower = Tower()
    assert other.is_repeated_blocks(tower.blocks) and not other.is_repeated_blocks(tower)
    assert not other.is_repeated_blocks(nn.ModuleList([Block(), nn.Linear(1, 1)]))
    assert not other.is_repeated_blocks(nn.ModuleList())
    assert other.has_repeated_blocks(tower) and not other.has_repeated_blocks(Block())


def test_compile_regions_compiles_each_block_and_shares_parameters() -> None:
    torch.manual_seed(0)
    tower = Tower()
    x = torch.randn(5, 4)
    expected = tower(x)
    assert not other.has_compiled_regions(tower)
    compiled = other.compile_regions(tower, backend="eager")
    assert compiled is not tower and compiled._orig_mod is tower
    assert all(other.is_compiled_module(block) for block in compiled.blocks)
    assert not other.is_compiled_module(compiled) and not other.is_compiled_module(compiled.blocks)
    assert other.is_compiled_module(compiled.head)  # siblings of the block list are compiled whole
    assert other.has_compiled_regions(compiled) and not other.has_compiled_regions(tower)
    torch.testing.assert_close(compiled(x), expected)
    # One set of parameters: a step on the copy moves the original.
    assert compiled.head._orig_mod is tower.head and compiled.blocks[0]._orig_mod is tower.blocks[0]
    assert {id(p) for p in compiled.parameters()} == {id(p) for p in tower.parameters()}


def test_compile_regions_compiles_a_model_without_blocks_whole() -> None:
    model = nn.Linear(3, 3)
    compiled = other.compile_regions(model, backend="eager")
    assert other.is_compiled_module(compiled) and compiled._orig_mod is model
    torch.testing.assert_close(compiled(torch.ones(1, 3)), model(torch.ones(1, 3)))


@pytest.mark.parametrize("variant", ["compile_regions_deepspeed", "compile_regions_fsdp2"])
def test_engine_regional_compilation_compiles_blocks_in_place(variant: str) -> None:
    tower = Tower()
    assert getattr(other, variant)(tower, backend="eager") is None
    assert all(block._compiled_call_impl is not None for block in tower.blocks)


# --- model structure ------------------------------------------------------------------------------------
def test_get_module_children_bottom_up_lists_children_before_parents() -> None:
    tower = Tower()
    named = other.get_module_children_bottom_up(tower, return_fqns=True)
    names = [name for name, _ in named]
    assert names == [
        "embed", "blocks.0.linear", "blocks.0", "blocks.1.linear", "blocks.1", "blocks.2.linear", "blocks.2",
        "blocks", "head", "",
    ]  # fmt: skip
    assert named[-1][1] is tower
    modules = other.get_module_children_bottom_up(tower)
    assert modules == [module for _, module in named]
    assert len(modules) == len(list(tower.modules()))


def test_recursive_getattr() -> None:
    tower = Tower()
    assert other.recursive_getattr(tower, "blocks.1.linear.weight") is tower.blocks[1].linear.weight
    with pytest.raises(AttributeError):
        other.recursive_getattr(tower, "blocks.missing")


def test_tensor_parallel_facts_of_a_plain_model() -> None:
    model = Tower()
    # None (as upstream) for a model that is not split by tensor parallelism.
    assert other.get_model_tp_size(model) is None and not other.model_has_dtensor(model)
    model._tp_size = 4  # what some transformers releases set on a tensor-parallel model
    assert other.get_model_tp_size(model) == 4


def test_tensor_parallel_size_from_each_transformers_layout() -> None:
    from types import SimpleNamespace

    model: Any = Tower()
    model.tp_size = 2  # transformers < 5: on the model
    assert other.get_model_tp_size(model) == 2
    model.tp_size = None  # transformers >= 5: a None stub there, the degree in the config
    model.config = SimpleNamespace(distributed_config=SimpleNamespace(tp_size=4))
    assert other.get_model_tp_size(model) == 4
    model.config = SimpleNamespace(distributed_config={"tp_size": 8})  # a config read back from JSON
    assert other.get_model_tp_size(model) == 8
    model.config = SimpleNamespace(distributed_config=None)
    assert other.get_model_tp_size(model) is None


# --- small helpers ---------------------------------------------------------------------------------------
def test_convert_bytes() -> None:
    assert other.convert_bytes(512) == "512 bytes"
    assert other.convert_bytes(1536) == "1.5 KB"
    assert other.convert_bytes(3 * 1024**3) == "3.0 GB"
    assert other.convert_bytes(2 * 1024**5) == "2.0 PB"


def test_get_pretty_name() -> None:
    assert other.get_pretty_name(Tower) == "Tower"
    assert other.get_pretty_name(Tower()) == "Tower"
    assert other.get_pretty_name(Tower.forward) == "Tower.forward"
    assert other.get_pretty_name(3) == "int"


def test_merge_dicts_merges_nested_keys_in_place() -> None:
    destination = {"a": {"y": 2, "deep": {"k": 1}}, "b": 3}
    out = other.merge_dicts({"a": {"x": 1, "deep": {"j": 0}}, "c": 4}, destination)
    assert out is destination
    assert destination == {"a": {"y": 2, "deep": {"k": 1, "j": 0}, "x": 1}, "b": 3, "c": 4}


def test_ports() -> None:
    port = other.get_free_port()
    assert not other.is_port_in_use(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("localhost", port))
        server.listen(1)
        assert other.is_port_in_use(port)


def test_check_os_kernel_reads_the_release(caplog: pytest.LogCaptureFixture) -> None:
    assert _kernel_version("4.15.0-1-generic") == "4.15.0"
    assert _kernel_version("6.8") == "6.8.0"
    assert _kernel_version("unknown") is None
    with caplog.at_level(logging.WARNING):
        other.check_os_kernel()  # this machine's kernel: warns only if it is older than 5.5


@pytest.mark.parametrize(("system", "release", "warns"), [
    ("Linux", "5.4.0-35-generic", True), ("Linux", "5.15.0-35-generic", False), ("Darwin", "5.4.0-35-generic", False),
])  # fmt: skip
def test_check_os_kernel_as_upstreams_tests_drive_it(system: str, release: str, warns: bool) -> None:
    from unittest import mock

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    try:
        with mock.patch("platform.uname", return_value=mock.Mock(release=release, system=system)):
            other.check_os_kernel()
    finally:
        logging.getLogger().removeHandler(handler)
    assert len(records) == warns
    if warns:  # upstream's tests read record.msg itself (an f-string there, not %-arguments)
        assert records[0].levelname == "WARNING" and "5.4.0" in records[0].msg and "5.5.0" in records[0].msg


def test_accelerator_checks_the_kernel() -> None:
    from unittest import mock

    from accelerate import Accelerator

    with mock.patch("accelerate.connector.check_os_kernel") as check:
        Accelerator(cpu=True)
    check.assert_called_once_with()


def test_save_safetensors_with_shared_memory_warns_as_upstream(tmp_path: Path) -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(10, 10)
            self.b = self.a

    records: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    try:
        other.save(Model().state_dict(), tmp_path / "model.safetensors", safe_serialization=True)
    finally:
        logging.getLogger().removeHandler(handler)
    assert len(records) == 1 and "Removed shared tensor" in records[0].getMessage()
    from safetensors.torch import load_file

    assert sorted(load_file(tmp_path / "model.safetensors")) == ["a.bias", "a.weight"]


def test_np_core_is_numpys_core_module() -> None:
    assert other.np_core.multiarray is not None
    assert other.np_core.__name__ in ("numpy._core", "numpy.core")


# --- save / load --------------------------------------------------------------------------------------------
def test_save_and_load_round_trip_numpy_and_tensors(tmp_path: Path) -> None:
    obj = {"w": torch.arange(4.0), "rng": np.random.get_state(), "arr": np.arange(3)}
    target = tmp_path / "obj.pt"
    other.save(obj, target)
    assert [p.name for p in tmp_path.iterdir()] == ["obj.pt"]  # no temporary file left behind
    loaded = other.load(target)  # weights_only=True, NumPy allowed through TORCH_SAFE_GLOBALS
    assert torch.equal(loaded["w"], obj["w"]) and np.array_equal(loaded["arr"], obj["arr"])
    assert np.array_equal(loaded["rng"][1], obj["rng"][1])
    before = set(torch.serialization.get_safe_globals())  # torch keeps a set: compare without order
    other.load(target)
    assert set(torch.serialization.get_safe_globals()) == before  # the process's own list is left alone


def test_load_refuses_arbitrary_objects_unless_asked(tmp_path: Path) -> None:
    target = tmp_path / "obj.pt"
    other.save({"cls": Tower}, target)
    with pytest.raises(Exception, match="weights_only|Unsupported global"):
        other.load(target)
    assert other.load(target, weights_only=False)["cls"] is Tower


def test_save_replaces_a_file_atomically_and_safetensors(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    target = tmp_path / "weights.safetensors"
    target.write_bytes(b"old")
    weights = {"a": torch.ones(2, 2), "b": torch.zeros(3)}
    other.save(weights, target, safe_serialization=True)
    loaded = load_file(str(target))
    assert torch.equal(loaded["a"], weights["a"]) and torch.equal(loaded["b"], weights["b"])
    with pytest.raises(TypeError, match="dict of tensors"):
        other.save([torch.ones(1)], tmp_path / "x.safetensors", safe_serialization=True)
    with pytest.raises(IsADirectoryError):
        other.save({"a": torch.ones(1)}, tmp_path)


def test_save_to_a_file_object() -> None:
    buffer = io.BytesIO()
    other.save({"x": torch.ones(2)}, buffer)
    buffer.seek(0)
    assert torch.equal(other.load(buffer)["x"], torch.ones(2))


def test_clean_state_dict_for_safetensors_drops_tied_copies(caplog: pytest.LogCaptureFixture) -> None:
    shared = torch.ones(2, 3)
    state = {"a": shared, "b": shared, "c": torch.ones(3, 2).t(), "n": 5}
    with caplog.at_level(logging.WARNING):
        cleaned = other.clean_state_dict_for_safetensors(state)
    assert list(cleaned) == ["a", "c", "n"]
    assert cleaned["c"].is_contiguous() and cleaned["n"] == 5
    assert "b (= a)" in caplog.text


def _save_from_main(folder: str) -> list[str]:
    rank = PartialState().process_index
    other.save({"rank": torch.tensor(rank)}, Path(folder) / "out.pt")
    other.wait_for_everyone()
    return sorted(p.name for p in Path(folder).iterdir())


def test_save_writes_on_the_main_process_only(pool2: WorkerPool, tmp_path: Path) -> None:
    assert pool2.run(_save_from_main, str(tmp_path), timeout=60) == [["out.pt"], ["out.pt"]]
    assert int(other.load(tmp_path / "out.pt")["rank"]) == 0


def _skip_wait_on_rank_zero() -> str:
    if PartialState().process_index == 0:
        return "skipped"
    try:
        other.wait_for_everyone()
    except Exception as exc:  # noqa: BLE001 - the debug check's error is the result
        return type(exc).__name__
    return "passed"


def test_wait_for_everyone_is_the_checked_barrier(pool2: WorkerPool) -> None:
    env = {"ACCELERATE_DEBUG_MODE": "1", "ACCELERATE_DEBUG_TIMEOUT": "2"}
    assert pool2.run(_skip_wait_on_rank_zero, env=env, timeout=60) == [
        "skipped",
        "DistributedOperationException",
    ]
