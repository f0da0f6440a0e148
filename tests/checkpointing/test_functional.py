"""Upstream's functional checkpoint interface: save/load_accelerator_state, save/load_custom_state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from accelerate import Accelerator
from accelerate.checkpointing import (
    MANIFEST_NAME,
    CheckpointError,
    load_accelerator_state,
    load_custom_state,
    save_accelerator_state,
    save_custom_state,
    verify_checkpoint,
)
from accelerate.state import PartialState
from tests.checkpointing.harness import Counter, assert_snapshots_equal, build, scramble, snapshot, train
from tests.helpers.pool import WorkerPool


def _save(bundle: Any, path: Path, step: int, **kwargs: Any) -> Path:
    return save_accelerator_state(
        path,
        [bundle.model.state_dict()],
        [bundle.optimizer],
        [bundle.scheduler],
        bundle.dataloaders,
        PartialState(cpu=True).process_index,
        step,
        scaler=bundle.scaler,
        **kwargs,
    )


def _load(bundle: Any, path: Path, **kwargs: Any) -> dict[str, Any]:
    return load_accelerator_state(
        path,
        [bundle.model],
        [bundle.optimizer],
        [bundle.scheduler],
        bundle.dataloaders,
        PartialState(cpu=True).process_index,
        scaler=bundle.scaler,
        **kwargs,
    )


def test_round_trip_with_a_custom_object(tmp_path: Path) -> None:
    bundle = build(seed=2)
    train(bundle, 3)
    bundle.scaler.scale(torch.ones(()))
    bundle.scaler.update(32.0)
    path = _save(bundle, tmp_path / "ckpt", step=7)
    save_custom_state(bundle.counter, path, index=0)
    expected = snapshot(bundle)  # consumes generators: reload and compare what they produce next
    _load(bundle, path)
    load_custom_state(bundle.counter, path, 0)
    assert_snapshots_equal(snapshot(bundle), expected)
    scramble(bundle)
    result = _load(bundle, path, map_location="on_device", load_kwargs={"weights_only": True}, strict=True)
    load_custom_state(bundle.counter, path, index=0)
    assert result == {"step": 7, "verified": True, "world_size": 1}
    assert_snapshots_equal(snapshot(bundle), expected)


def test_custom_state_joins_the_committed_checkpoint(tmp_path: Path) -> None:
    bundle = build()
    path = _save(bundle, tmp_path / "ckpt", step=3, safe_serialization=False)
    before = verify_checkpoint(path)
    save_custom_state(bundle.counter, path, index=1)
    after = verify_checkpoint(path)  # still committed, and every file checks out
    assert set(after.files) == set(before.files) | {"custom_checkpoint_1.pkl"}
    assert after.step == 3 and {r.checksum for n, r in before.files.items()} <= {
        r.checksum for r in after.files.values()
    }
    assert not [p.name for p in path.iterdir() if p.name.startswith(".")]  # no staging left behind
    # A damaged custom file is caught by its checksum.
    target = path / "custom_checkpoint_1.pkl"
    target.write_bytes(target.read_bytes()[:-3] + b"xyz")
    with pytest.raises(CheckpointError, match="custom_checkpoint_1.pkl"):
        load_custom_state(Counter(), path, index=1)


def test_custom_state_in_a_plain_folder(tmp_path: Path) -> None:
    counter = Counter()
    counter.value = 11
    written = save_custom_state(counter, tmp_path / "plain", index=2)
    assert written == tmp_path / "plain" / "custom_checkpoint_2.pkl"
    assert sorted(p.name for p in written.parent.iterdir()) == ["custom_checkpoint_2.pkl"]
    restored = Counter()
    load_custom_state(restored, tmp_path / "plain", index=2)  # no manifest: read unverified, with a warning
    assert restored.value == 11
    with pytest.raises(TypeError, match="state_dict"):
        save_custom_state(object(), tmp_path / "plain")


def test_same_files_as_accelerator_save_state(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    loader = DataLoader(list(range(8)), batch_size=2, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    counter = Counter()
    accelerator.register_for_checkpointing(counter)
    accelerator.save_state(str(tmp_path / "by_accelerator"))
    path = save_accelerator_state(
        tmp_path / "functional",
        [accelerator.get_state_dict(model)],
        [optimizer],
        [scheduler],
        [loader],
        accelerator.process_index,
        step=0,
    )
    save_custom_state(counter, path, 0)
    by_accelerator = verify_checkpoint(tmp_path / "by_accelerator")
    functional = verify_checkpoint(path)
    assert set(functional.files) == set(by_accelerator.files)
    assert {p.name for p in path.iterdir()} == {p.name for p in (tmp_path / "by_accelerator").iterdir()}
    assert MANIFEST_NAME in {p.name for p in path.iterdir()}
    for name in ("model.safetensors", "optimizer.bin", "scheduler.bin", "custom_checkpoint_0.pkl"):
        assert functional.files[name].checksum == by_accelerator.files[name].checksum, name
    accelerator.load_state(str(path))  # and the Accelerator reads what the functions wrote


def test_arguments_are_checked(tmp_path: Path) -> None:
    bundle = build()
    path = _save(bundle, tmp_path / "ckpt", step=1)
    with pytest.raises(ValueError, match="process_index=3"):
        save_accelerator_state(tmp_path / "x", [], [], [], [], 3, 0)
    with pytest.raises(TypeError, match="Unsupported optimizer map location passed.*map_location='cuda:7'"):
        _load(bundle, path, map_location="cuda:7")
    with pytest.raises(ValueError, match="weights_only"):
        _load(bundle, path, load_kwargs={"weights_only": False})
    with pytest.raises(TypeError, match="assign"):
        _load(bundle, path, assign=True)
    assert _load(bundle, path, strict=False)["step"] == 1


def _save_and_load_on_two_ranks(directory: str) -> dict[str, Any]:
    state = PartialState()
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    counter = Counter()
    counter.value = 5
    path = save_accelerator_state(
        directory, [model.state_dict()], [optimizer], [], [], state.process_index, 9
    )
    save_custom_state(counter, path, 0)
    state.wait_for_everyone()
    with torch.no_grad():
        model.weight.zero_()
    restored = Counter()
    result = load_accelerator_state(path, [model], [optimizer], [], [], state.process_index)
    load_custom_state(restored, path, 0)
    return {
        "step": result["step"],
        "world_size": result["world_size"],
        "weight_nonzero": bool(model.weight.abs().sum() > 0),
        "counter": restored.value,
        "files": sorted(p.name for p in Path(path).iterdir() if p.name.startswith("random_states")),
    }


def test_two_processes_save_and_load(tmp_path: Path, pool2: WorkerPool) -> None:
    results = pool2.run(_save_and_load_on_two_ranks, str(tmp_path / "ckpt"), timeout=90)
    for result in results:
        assert result == {
            "step": 9,
            "world_size": 2,
            "weight_nonzero": True,
            "counter": 5,
            "files": ["random_states_0.pkl", "random_states_1.pkl"],
        }


def test_accelerator_save_writes_through_the_durable_single_file_path(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    accelerator = Accelerator(cpu=True)
    accelerator.save({"w": torch.ones(2)}, tmp_path / "w.pt")
    accelerator.save({"w": torch.zeros(2)}, tmp_path / "w.safetensors", safe_serialization=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.pt", "w.safetensors"]  # no temporary files left
    assert torch.equal(torch.load(tmp_path / "w.pt")["w"], torch.ones(2))
    assert torch.equal(load_file(str(tmp_path / "w.safetensors"))["w"], torch.zeros(2))
