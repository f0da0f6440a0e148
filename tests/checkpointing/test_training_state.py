from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from accelerate.backends.dtensor_io.checkpoint_io import ShardedParts
from accelerate.checkpointing import (
    MANIFEST_NAME,
    CheckpointError,
    latest_checkpoint,
    load_training_state,
    save_training_state,
    verify_checkpoint,
)
from accelerate.state import PartialState
from tests.checkpointing.harness import assert_snapshots_equal, build, scramble, snapshot, train
from tests.helpers.pool import WorkerPool

EXPECTED_FILES = {
    "model.safetensors",
    "optimizer.bin",
    "scheduler.bin",
    "dl_state_dict.bin",
    "scaler.pt",
    "custom_checkpoint_0.pkl",
    "random_states_0.pkl",
    MANIFEST_NAME,
}


def _save(bundle: Any, path: Path, step: int, safe: bool = True) -> Path:
    return save_training_state(
        path, state=PartialState(cpu=True), step=step, safe_serialization=safe, **bundle.save_kwargs()
    )


def _load(bundle: Any, path: Path, strict: bool = True) -> dict[str, Any]:
    return load_training_state(path, state=PartialState(cpu=True), strict=strict, **bundle.load_kwargs())


@pytest.mark.parametrize("safe", [True, False])
def test_round_trip_of_every_artifact(tmp_path: Path, safe: bool) -> None:
    bundle = build(seed=3)
    train(bundle, 3)
    bundle.scaler.scale(torch.ones(()))
    bundle.scaler.update(64.0)
    random.seed(1)
    np.random.seed(1)
    path = _save(bundle, tmp_path / "ckpt", step=42, safe=safe)
    names = {p.name for p in path.iterdir()}
    assert names == (
        EXPECTED_FILES if safe else EXPECTED_FILES - {"model.safetensors"} | {"pytorch_model.bin"}
    )
    manifest = verify_checkpoint(path)
    assert manifest.step == 42 and manifest.world_size == 1
    assert manifest.extra["num_optimizers"] == 1
    expected = snapshot(bundle)  # consumes generators: reload to compare against the same draws

    restored = build(seed=5)
    scramble(restored)
    info = _load(restored, path)
    assert info == {"step": 42, "verified": True, "world_size": 1}
    assert restored.model.head.weight is restored.model.embed.weight
    assert_snapshots_equal(snapshot(restored), expected)


def test_second_model_optimizer_and_scheduler_get_numbered_names(tmp_path: Path) -> None:
    a, b = build(0), build(1)
    path = save_training_state(
        tmp_path / "ckpt",
        state=PartialState(cpu=True),
        models_state_dicts=[a.model.state_dict(), b.model.state_dict()],
        optimizers=[a.optimizer, b.optimizer],
        schedulers=[a.scheduler, b.scheduler],
        dataloaders=[a.stateful, b.stateful],
        custom_objects=[a.counter, b.counter],
    )
    names = {p.name for p in path.iterdir()}
    for name in (
        "model_1.safetensors",
        "optimizer_1.bin",
        "scheduler_1.bin",
        "dl_state_dict_1.bin",
        "custom_checkpoint_1.pkl",
    ):
        assert name in names
    with pytest.raises(CheckpointError, match="no weights for model 2"):
        load_training_state(path, state=PartialState(cpu=True), models=[a.model, b.model, build().model])


def test_truncated_file_gives_a_clear_error(tmp_path: Path) -> None:
    bundle = build()
    path = _save(bundle, tmp_path / "ckpt", step=1)
    target = path / "optimizer.bin"
    target.write_bytes(target.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match=r"optimizer\.bin is damaged.*truncated"):
        _load(build(), path)


def test_corrupted_model_gives_a_clear_error(tmp_path: Path) -> None:
    path = _save(build(), tmp_path / "ckpt", step=1)
    data = bytearray((path / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors is corrupted"):
        _load(build(), path)


def test_missing_file_gives_a_clear_error(tmp_path: Path) -> None:
    path = _save(build(), tmp_path / "ckpt", step=1)
    (path / "scheduler.bin").unlink()
    with pytest.raises(CheckpointError, match=r"scheduler\.bin is missing"):
        _load(build(), path)


def test_strict_governs_missing_scaler_and_model_keys(tmp_path: Path) -> None:
    bundle = build()
    kwargs = bundle.save_kwargs()
    kwargs["scaler"] = None
    kwargs["models_state_dicts"] = [{k: v for k, v in bundle.model.state_dict().items() if k != "body.bias"}]
    path = save_training_state(tmp_path / "ckpt", state=PartialState(cpu=True), **kwargs)
    with pytest.raises(CheckpointError, match="body.bias"):
        _load(build(), path, strict=True)
    kwargs = build().load_kwargs()
    kwargs["models"] = []
    with pytest.raises(CheckpointError, match=r"scaler\.pt"):
        load_training_state(path, state=PartialState(cpu=True), **kwargs)
    load_training_state(path, state=PartialState(cpu=True), strict=False, **build().load_kwargs())


def _write_upstream_style(bundle: Any, path: Path, step: int) -> None:
    """What upstream Accelerate writes: no manifest, tied weights deduplicated, numpy arrays pickled."""
    path.mkdir(parents=True)
    state = {k: v.contiguous() for k, v in bundle.model.state_dict().items() if k != "head.weight"}
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    torch.save(bundle.optimizer.state_dict(), path / "optimizer.bin")
    torch.save(bundle.scheduler.state_dict(), path / "scheduler.bin")
    torch.save(bundle.scaler.state_dict(), path / "scaler.pt")
    torch.save(bundle.counter.state_dict(), path / "custom_checkpoint_0.pkl")
    rng = {
        "step": step,
        "random_state": random.getstate(),
        "numpy_random_seed": np.random.get_state(),
        "torch_manual_seed": torch.get_rng_state(),
    }
    torch.save(rng, path / "random_states_0.pkl")


def test_loads_a_folder_saved_by_upstream(tmp_path: Path) -> None:
    bundle = build(seed=2)
    train(bundle, 2)
    path = tmp_path / "checkpoints" / "checkpoint_0"
    _write_upstream_style(bundle, path, step=17)
    expected = snapshot(bundle)
    restored = build(seed=4)
    scramble(restored)
    kwargs = restored.load_kwargs()
    # Default loaders, prepared one included: upstream writes dl_state_dict.bin only for stateful loaders,
    # so a folder it saved loads without one even with strict=True.
    # strict=True: the tied head.weight that upstream's file omits is filled from embed.weight.
    info = load_training_state(path, state=PartialState(cpu=True), strict=True, **kwargs)
    assert info == {"step": 17, "verified": False, "world_size": None}
    actual = snapshot(restored)
    expected["position"] = actual["position"]
    expected["plain_order"] = actual["plain_order"]  # upstream keeps no sampler generator state here
    assert_snapshots_equal(actual, expected)
    assert latest_checkpoint(tmp_path) == path


def test_rng_file_with_arbitrary_objects_is_refused(tmp_path: Path) -> None:
    bundle = build()
    path = _save(bundle, tmp_path / "ckpt", step=0)
    (path / MANIFEST_NAME).unlink()  # as in a folder from upstream: files are read unverified
    torch.save({"random_state": os.system}, path / "random_states_0.pkl")
    with pytest.raises(CheckpointError, match="random_states_0.pkl"):
        _load(build(), path)


# --- two real processes -------------------------------------------------------------------------------
def save_and_load_on_each_rank(directory: str) -> dict[str, Any]:
    state = PartialState()
    bundle = build(seed=0)  # the same model everywhere, as after DDP's broadcast
    train(bundle, 2)
    torch.manual_seed(100 + state.process_index)  # generator states differ per rank
    path = save_training_state(Path(directory) / "ckpt", state=state, step=5, **bundle.save_kwargs())
    expected = snapshot(bundle)
    restored = build(seed=7)
    scramble(restored)
    info = load_training_state(path, state=state, **restored.load_kwargs())
    actual = snapshot(restored)
    assert_snapshots_equal(actual, expected)
    return {
        "files": sorted(p.name for p in path.iterdir()),
        "step": info["step"],
        "torch_draw": expected["rng"][2],
    }


class FailingLoader:
    """A loader whose sampler cannot be read on rank 1 (say, a broken custom sampler)."""

    @property
    def sampler(self) -> Any:
        if PartialState().process_index == 1:
            raise OSError("simulated failure on rank 1")
        return None


def save_with_a_failing_rank(directory: str) -> str:
    state = PartialState()
    try:
        save_training_state(Path(directory) / "bad", state=state, dataloaders=[FailingLoader()])
    except CheckpointError as exc:
        return str(exc)
    return "no error"


def test_two_ranks_save_and_load(tmp_path: Path, pool2: WorkerPool) -> None:
    results = pool2.run(save_and_load_on_each_rank, str(tmp_path))
    assert results[0]["files"] == results[1]["files"]
    assert {"random_states_0.pkl", "random_states_1.pkl"} <= set(results[0]["files"])
    assert results[0]["torch_draw"] != results[1]["torch_draw"]  # each rank got its own generator back
    manifest = verify_checkpoint(tmp_path / "ckpt")
    assert manifest.world_size == 2 and "random_states_1.pkl" in manifest.files
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_a_failure_on_one_rank_raises_everywhere_and_commits_nothing(
    tmp_path: Path, pool2: WorkerPool
) -> None:
    messages = pool2.run(save_with_a_failing_rank, str(tmp_path))
    for message in messages:
        assert "failed on rank 1 (rank 1: OSError: simulated failure on rank 1)" in message
        assert "nothing was committed" in message
    assert list(tmp_path.iterdir()) == []


class OneNodePerProcess:
    """The real two-process state, seen as if each process ran on a machine of its own."""

    def __init__(self, state: PartialState) -> None:
        self._state = state
        self.num_processes = state.num_processes
        self.process_index = state.process_index
        self.local_process_index = 0
        self.is_main_process = state.is_main_process
        self.is_local_main_process = True
        self.use_distributed = state.use_distributed

    def wait_for_everyone(self) -> None:
        self._state.wait_for_everyone()


class EnteredCollectives(ShardedParts):
    """FSDP's parts (whose node_error refuses the save); writing them means the save entered DCP's collectives."""

    def write(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("entered DCP's collectives")


def save_on_each_of_two_nodes(directory: str, sharded: bool) -> str:
    state = PartialState()
    bundle = build(seed=0)
    # Node-local disks: the same path names another disk on each machine; here, another folder.
    target = Path(directory) / f"node{state.process_index}" / "ckpt"
    kwargs = bundle.save_kwargs()
    if sharded:  # a stand-in for FSDP's parts: writing them would enter DCP's collectives
        kwargs["parts"] = EnteredCollectives({0: bundle.model})
    try:
        save_training_state(target, state=OneNodePerProcess(state), step=3, save_on_each_node=True, **kwargs)
    except CheckpointError as exc:
        return str(exc)
    return "saved"


def test_save_on_each_node_writes_a_whole_copy_on_every_node(tmp_path: Path, pool2: WorkerPool) -> None:
    assert pool2.run(save_on_each_of_two_nodes, str(tmp_path), False) == ["saved", "saved"]
    for node in (0, 1):
        manifest = verify_checkpoint(tmp_path / f"node{node}" / "ckpt")
        assert manifest.step == 3 and f"random_states_{node}.pkl" in manifest.files
        assert "model.safetensors" in manifest.files or "pytorch_model.bin" in manifest.files


def test_save_on_each_node_of_a_sharded_model_is_refused_on_every_rank(
    tmp_path: Path, pool2: WorkerPool
) -> None:
    # Only node 1's ranks can see the problem; node 0's must not be left waiting in DCP's collectives.
    messages = pool2.run(save_on_each_of_two_nodes, str(tmp_path), True, timeout=60)
    assert all("save_on_each_node=False" in message for message in messages), messages
    assert not any("entered DCP's collectives" in message for message in messages), messages
    assert not list(tmp_path.rglob("*.distcp"))


def test_the_writer_copies_every_written_state_through_host_copy(tmp_path: Path) -> None:
    """CheckpointIO.host_copy (XLA's copy to CPU) sees each model, optimizer and custom state written."""
    seen: list[Any] = []

    def host_copy(obj: Any) -> Any:
        seen.append(obj)
        return obj

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    save_training_state(
        tmp_path / "ckpt",
        state=PartialState(),
        models_state_dicts=[model.state_dict()],
        optimizers=[optimizer],
        host_copy=host_copy,
    )
    assert len(seen) == 2 and set(seen[0]) == {"weight", "bias"} and "param_groups" in seen[1]
