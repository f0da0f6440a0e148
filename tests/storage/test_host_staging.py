"""HostStaging: what a save's writers get for device tensors (CPU tensors stand in for CUDA here).

The CUDA parts themselves (pinned memory, the side stream, events) run in ``make gpu-check``
(tests/checkpointing/test_cuda_state.py); these tests pin down the shapes of what is staged and the
location tags the files record, with a staging that treats CPU tensors as it treats CUDA ones.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate.storage import host_staging
from accelerate.storage.durable_io import save_torch
from accelerate.storage.host_staging import _ORIGINS, HostStaging
from accelerate.storage.model_files import prepare_state_dict, write_weights_file
from accelerate.storage.safetensors_io import read_safetensors


class CpuStaging(HostStaging):
    """Stages CPU tensors as if they were on ``cuda:0`` (no stream, no pinned memory)."""

    def __init__(self) -> None:
        super().__init__()
        self._enabled = True

    def _stages(self, tensor: torch.Tensor) -> bool:
        return tensor.layout == torch.strided

    def _origin(self, tensor: torch.Tensor) -> str | None:
        return "cuda:0"

    def _pinned(self, nbytes: int) -> bool:
        return False


def _location_tags(path: Path) -> list[str]:
    """The location each storage of a torch.save file records (what map_location is asked about)."""
    tags: list[str] = []

    def remember(storage: Any, location: str) -> Any:
        tags.append(location)
        return storage

    torch.load(path, map_location=remember, weights_only=True)
    return tags


def test_without_cuda_nothing_is_copied() -> None:
    state = {"w": torch.ones(3), "nested": [torch.zeros(2)]}
    staging = HostStaging()
    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only path")
    assert staging.stage(state) is state and staging.weights(state) is state
    staging.close()


def test_stage_keeps_views_of_one_storage_and_the_containers() -> None:
    base = torch.arange(12, dtype=torch.float32)
    state: dict[str, Any] = {"state": {0: {"a": base[:6], "b": base[6:].view(2, 3), "step": torch.tensor(3.0)}},
                             "param_groups": [{"lr": 0.1, "params": [0]}]}  # fmt: skip
    with CpuStaging() as staging:
        staged = staging.stage(state)
        a, b = staged["state"][0]["a"], staged["state"][0]["b"]
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()  # still one storage
        assert a.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()  # a copy of it
        assert torch.equal(a, base[:6]) and torch.equal(b, base[6:].view(2, 3)) and b.stride() == (3, 1)
        assert staged["param_groups"] == state["param_groups"]
    assert not _ORIGINS  # closing forgets the origins


def test_a_staged_file_records_the_device_its_tensors_came_from(tmp_path: Path) -> None:
    state = {"exp_avg": torch.randn(4), "exp_avg_sq": torch.rand(4)}
    with CpuStaging() as staging:
        save_torch(staging.stage(state), tmp_path / "staged.bin")
    save_torch(state, tmp_path / "plain.bin")
    assert _location_tags(tmp_path / "staged.bin") == ["cuda:0", "cuda:0"]
    assert _location_tags(tmp_path / "plain.bin") == ["cpu", "cpu"]
    # Only the location differs: the same tensors come back.
    loaded = torch.load(tmp_path / "staged.bin", map_location="cpu", weights_only=True)
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    # Outside a save, the same memory is plain host memory again.
    save_torch(state, tmp_path / "after.bin")
    assert _location_tags(tmp_path / "after.bin") == ["cpu", "cpu"]


def test_weights_are_compact_copies_with_ties_kept(tmp_path: Path) -> None:
    shared = torch.randn(4, 4)
    state = OrderedDict(embed=shared, head=shared, t=torch.randn(3, 5).t(), bias=torch.zeros(0))
    with CpuStaging() as staging:
        staged = staging.weights(state)
        assert isinstance(staged, OrderedDict) and staged["embed"] is staged["head"]
        assert staged["t"].is_contiguous() and torch.equal(staged["t"], state["t"])
        prepared = prepare_state_dict(staged, safetensors=True)
        assert prepared.aliases == {"head": "embed"}
        ready: list[str] = []
        names = {id(t): n for n, t in prepared.tensors.items()}
        write_weights_file(tmp_path / "m.safetensors", prepared, ready=lambda t: ready.append(names[id(t)]))
    assert sorted(ready) == ["bias", "embed", "t"]  # each tensor waited for before its bytes
    tensors, _ = read_safetensors(bytearray((tmp_path / "m.safetensors").read_bytes()), source="m")
    assert torch.equal(tensors["t"], state["t"]) and torch.equal(tensors["embed"], shared)


def test_one_save_pins_at_most_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the budget, copies go to pageable memory: the caching host allocator never gives pinned
    memory back, so a big optimizer state must not stay page-locked after its save."""
    monkeypatch.setattr(host_staging, "PINNED_BUDGET_BYTES", 100)
    staging = HostStaging()
    staging._enabled = True  # as on a CUDA machine; only the accounting runs here
    assert staging._pinned(60)
    assert not staging._pinned(60)  # would pass the budget: pageable
    assert staging._pinned(40)  # what still fits is pinned
    assert not staging._pinned(1)
