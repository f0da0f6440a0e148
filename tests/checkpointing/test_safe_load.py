"""Loads that cannot hang or half-apply (issue 29 §2).

* A FIFO, socket or device where a checkpoint file should be is refused at once, naming the file
  and what it is (reading one would block forever, on a thread that no signal interrupts).
* A load that fails leaves every object exactly as it was: everything is read and checked before
  the first model, optimizer, scheduler, scaler, loader, registered object or generator changes.
* A saved registered object that nothing is registered to receive is an error, not skipped.
"""

from __future__ import annotations

import copy
import os
import random
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from accelerate.checkpointing import (
    MANIFEST_NAME,
    CheckpointError,
    load_state_dict_file,
    load_training_state,
    save_training_state,
)
from accelerate.state import PartialState
from accelerate.utils import load_checkpoint_in_model
from tests.checkpointing.harness import Bundle, Counter, build, scramble, train
from tests.helpers.pool import WorkerPool

# How long a refused load may take; a load that reads a FIFO never returns at all.
DEADLINE = 10.0


def _save(bundle: Bundle, path: Path, step: int = 3, **overrides: Any) -> Path:
    kwargs = {**bundle.save_kwargs(), **overrides}
    return save_training_state(path, state=PartialState(cpu=True), step=step, **kwargs)


def _load(bundle: Bundle, path: Path, **overrides: Any) -> dict[str, Any]:
    kwargs = {**bundle.load_kwargs(), **overrides}
    return load_training_state(path, state=PartialState(cpu=True), **kwargs)


# --- non-regular files ---------------------------------------------------------------------------
def _unblock(paths: list[Path]) -> None:
    """Opens the write end of each FIFO and closes it: a reader stuck in open() or read() gets EOF."""
    for path in paths:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue  # nobody is reading it
        os.close(fd)


def _raises_in_time(call: Callable[[], Any], fifos: list[Path]) -> BaseException:
    """Runs ``call`` on a thread; it must raise within DEADLINE seconds. Returns what it raised."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    if thread.is_alive():
        for _ in range(50):  # let the stuck load finish (it then fails on the empty file)
            _unblock(fifos)
            thread.join(0.1)
            if not thread.is_alive():
                break
        pytest.fail(f"the load was still blocked after {DEADLINE}s (reading a FIFO)")
    assert outcome and outcome[0] is not None, "the load succeeded"
    return outcome[0]


@pytest.fixture
def fifo_cleanup() -> Iterator[list[Path]]:
    fifos: list[Path] = []
    yield fifos
    _unblock(fifos)


def _replace_with_fifo(path: Path, fifos: list[Path]) -> None:
    path.unlink()
    os.mkfifo(path)
    fifos.append(path)


ALL_NAMES = [
    "model.safetensors",
    "pytorch_model.bin",
    "optimizer.bin",
    "scheduler.bin",
    "dl_state_dict.bin",
    "scaler.pt",
    "custom_checkpoint_0.pkl",
    "random_states_0.pkl",
    MANIFEST_NAME,
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ALL_NAMES)
def test_a_fifo_named_like_a_checkpoint_file_is_refused_at_once(
    tmp_path: Path, name: str, fifo_cleanup: list[Path]
) -> None:
    path = _save(build(), tmp_path / "ckpt", safe_serialization=name != "pytorch_model.bin")
    _replace_with_fifo(path / name, fifo_cleanup)
    error = _raises_in_time(lambda: _load(build(seed=1), path), fifo_cleanup)
    assert isinstance(error, CheckpointError), repr(error)
    assert name in str(error) and "FIFO" in str(error), str(error)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.bin", "random_states_0.pkl"])
def test_a_fifo_in_a_folder_without_manifest_is_refused_at_once(
    tmp_path: Path, name: str, fifo_cleanup: list[Path]
) -> None:
    path = _save(build(), tmp_path / "ckpt")
    # As a folder saved by upstream Accelerate: no manifest, no marker in the random-states file.
    (path / MANIFEST_NAME).unlink()
    rng = torch.load(path / "random_states_0.pkl", weights_only=True)
    rng.pop("accelerate_manifest")
    torch.save(rng, path / "random_states_0.pkl")
    _replace_with_fifo(path / name, fifo_cleanup)
    error = _raises_in_time(lambda: _load(build(seed=1), path), fifo_cleanup)
    assert isinstance(error, CheckpointError), repr(error)
    assert name in str(error) and "FIFO" in str(error), str(error)


def test_a_socket_named_like_a_checkpoint_file_is_refused(tmp_path: Path) -> None:
    path = _save(build(), tmp_path / "ckpt")
    (path / "optimizer.bin").unlink()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path / "optimizer.bin"))
        with pytest.raises(CheckpointError, match=r"optimizer\.bin is a socket"):
            _load(build(seed=1), path)


@pytest.mark.timeout(60)
def test_a_fifo_as_a_weights_file_is_refused_by_the_model_loaders(
    tmp_path: Path, fifo_cleanup: list[Path]
) -> None:
    model = build().model
    for name in ("model.safetensors", "pytorch_model.bin"):
        _replace_with_fifo_new(tmp_path / name, fifo_cleanup)
        error = _raises_in_time(lambda n=name: load_state_dict_file(tmp_path / n), fifo_cleanup)
        assert isinstance(error, CheckpointError) and name in str(error) and "FIFO" in str(error), error
    error = _raises_in_time(
        lambda: load_checkpoint_in_model(model, tmp_path / "model.safetensors"), fifo_cleanup
    )
    assert isinstance(error, CheckpointError) and "FIFO" in str(error), error


def _replace_with_fifo_new(path: Path, fifos: list[Path]) -> None:
    os.mkfifo(path)
    fifos.append(path)


def test_a_device_file_is_refused(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(CheckpointError, match="is a character device"):
        load_state_dict_file("/dev/zero")


# --- all or nothing ------------------------------------------------------------------------------
def _everything(bundle: Bundle) -> dict[str, Any]:
    """Every piece of state a load could change, copied, without consuming any generator."""
    return {
        "model": {k: v.clone() for k, v in bundle.model.state_dict().items()},
        "grads": {n: None if p.grad is None else p.grad.clone() for n, p in bundle.model.named_parameters()},
        "optimizer": copy.deepcopy(bundle.optimizer.state_dict()),
        "scheduler": copy.deepcopy(bundle.scheduler.state_dict()),
        "scaler": copy.deepcopy(bundle.scaler.state_dict()),
        "position": bundle.stateful.position,
        "counter": bundle.counter.value,
        "python": random.getstate(),
        "numpy": np.random.get_state(legacy=True),
        "torch": torch.get_rng_state().clone(),
        "sampler": bundle.plain.sampler.generator.get_state().clone(),  # type: ignore[attr-defined]
    }


def _assert_same(a: Any, b: Any, where: str = "") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _scrambled(seed: int = 1) -> Bundle:
    bundle = build(seed=seed)
    scramble(bundle)
    return bundle


def _fails_and_changes_nothing(bundle: Bundle, path: Path, match: str, **overrides: Any) -> str:
    before = _everything(bundle)
    with pytest.raises(CheckpointError, match=match) as info:
        _load(bundle, path, **overrides)
    _assert_same(_everything(bundle), before)
    return str(info.value)


def _trained(steps: int = 2) -> Bundle:
    bundle = build()
    train(bundle, steps)
    return bundle


def test_a_truncated_optimizer_file_changes_nothing(tmp_path: Path) -> None:
    path = _save(_trained(), tmp_path / "ckpt")
    data = (path / "optimizer.bin").read_bytes()
    (path / "optimizer.bin").write_bytes(data[: len(data) // 2])
    _fails_and_changes_nothing(_scrambled(), path, r"optimizer\.bin is damaged")


def test_a_corrupted_scheduler_file_changes_nothing(tmp_path: Path) -> None:
    path = _save(_trained(), tmp_path / "ckpt")
    data = bytearray((path / "scheduler.bin").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / "scheduler.bin").write_bytes(bytes(data))
    _fails_and_changes_nothing(_scrambled(), path, r"scheduler\.bin is corrupted")


def test_a_corrupted_random_states_file_changes_nothing(tmp_path: Path) -> None:
    path = _save(_trained(), tmp_path / "ckpt")
    data = bytearray((path / "random_states_0.pkl").read_bytes())
    data[-40] ^= 0xFF
    (path / "random_states_0.pkl").write_bytes(bytes(data))
    _fails_and_changes_nothing(_scrambled(), path, r"random_states_0\.pkl is corrupted")


def test_a_shape_mismatch_in_the_model_file_changes_nothing(tmp_path: Path) -> None:
    bundle = _trained()
    weights = bundle.model.state_dict()
    weights["body.bias"] = torch.zeros(7)  # after embed/head and body.weight in load order
    path = _save(bundle, tmp_path / "ckpt", models_state_dicts=[weights])
    message = _fails_and_changes_nothing(_scrambled(), path, r"body\.bias")
    assert "model.safetensors" in message and "shape" in message


@pytest.mark.parametrize("strict", [True, False])
def test_a_missing_or_unexpected_key_changes_nothing_when_strict(tmp_path: Path, strict: bool) -> None:
    bundle = _trained()
    weights = {k: v for k, v in bundle.model.state_dict().items() if k != "body.bias"}
    weights["extra.weight"] = torch.ones(2)
    path = _save(bundle, tmp_path / "ckpt", models_state_dicts=[weights])
    target = _scrambled()
    if strict:
        message = _fails_and_changes_nothing(target, path, r"body\.bias")
        assert "extra.weight" in message
        return
    bias = target.model.body.bias.detach().clone()
    _load(target, path, strict=False)
    assert torch.equal(target.model.body.bias, bias)  # kept its value
    assert torch.equal(target.model.body.weight, bundle.model.body.weight)


def test_an_optimizer_with_other_param_groups_changes_nothing(tmp_path: Path) -> None:
    bundle = _trained()
    path = _save(bundle, tmp_path / "ckpt")
    target = _scrambled()
    # One group per module instead of one for all: same parameters, other grouping.
    params = list(target.model.parameters())
    target.optimizer = torch.optim.AdamW([{"params": params[:1]}, {"params": params[1:]}], lr=0.1)
    train(target, 1)
    target.scheduler = torch.optim.lr_scheduler.StepLR(target.optimizer, step_size=2)
    message = _fails_and_changes_nothing(target, path, r"optimizer\.bin")
    assert "parameter group" in message


def test_an_optimizer_state_of_other_shapes_changes_nothing(tmp_path: Path) -> None:
    small = _trained()
    path = _save(small, tmp_path / "ckpt", models_state_dicts=[])
    # The same number of parameters, other shapes: torch's load_state_dict would take it silently.
    target = _scrambled()
    other = torch.nn.Linear(4, 3)
    target.optimizer = torch.optim.AdamW([*other.parameters(), target.model.body.bias], lr=0.1)
    other(torch.ones(4)).sum().backward()
    target.model.body.bias.grad = torch.ones(4)
    target.optimizer.step()
    target.scheduler = torch.optim.lr_scheduler.StepLR(target.optimizer, step_size=2)
    message = _fails_and_changes_nothing(target, path, r"optimizer\.bin", models=[])
    assert "shape" in message


# --- registered objects --------------------------------------------------------------------------
def test_a_saved_object_nobody_registered_is_an_error_and_changes_nothing(tmp_path: Path) -> None:
    bundle = _trained()
    path = _save(bundle, tmp_path / "ckpt", custom_objects=[bundle.counter, Counter()])
    message = _fails_and_changes_nothing(_scrambled(), path, r"custom_checkpoint_1\.pkl")
    assert "register_for_checkpointing" in message


def test_a_registered_object_without_a_saved_state_changes_nothing(tmp_path: Path) -> None:
    path = _save(_trained(), tmp_path / "ckpt")
    target = _scrambled()
    _fails_and_changes_nothing(
        target, path, r"custom_checkpoint_1\.pkl", custom_objects=[target.counter, Counter()]
    )


def test_a_registered_object_missing_from_an_upstream_folder_is_an_error(tmp_path: Path) -> None:
    bundle = _trained()
    path = _save(bundle, tmp_path / "ckpt", custom_objects=[bundle.counter, Counter()])
    (path / MANIFEST_NAME).unlink()
    for rng in path.glob("random_states_*.pkl"):
        rng.unlink()
    _fails_and_changes_nothing(_scrambled(), path, r"custom_checkpoint_1\.pkl")


# --- two processes -------------------------------------------------------------------------------
def _load_with_rank_1_corrupted(directory: str) -> dict[str, Any]:
    state = PartialState()
    bundle = _trained()
    path = save_training_state(Path(directory) / "ckpt", state=state, step=4, **bundle.save_kwargs())
    state.wait_for_everyone()
    if state.is_main_process:
        target = path / "random_states_1.pkl"
        data = bytearray(target.read_bytes())
        data[-40] ^= 0xFF
        target.write_bytes(bytes(data))
    state.wait_for_everyone()
    restored = _scrambled(seed=7)
    before = _everything(restored)
    try:
        load_training_state(path, state=state, **restored.load_kwargs())
    except CheckpointError as exc:
        message = str(exc)
    else:
        message = "loaded"
    _assert_same(_everything(restored), before)
    return {"message": message}


def test_a_file_damaged_on_one_rank_changes_nothing_on_any_rank(tmp_path: Path, pool2: WorkerPool) -> None:
    results = pool2.run(_load_with_rank_1_corrupted, str(tmp_path), timeout=120)
    for result in results:
        assert "failed on rank 1" in result["message"], result
        assert "random_states_1.pkl is corrupted" in result["message"], result


def test_accelerator_load_state_refuses_an_unreceived_registered_object(tmp_path: Path) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(3, 2))
    accelerator.register_for_checkpointing(Counter(), Counter())
    accelerator.save_state(str(tmp_path / "ckpt"))

    fresh = Accelerator(cpu=True)
    other = fresh.prepare(torch.nn.Linear(3, 2))
    with torch.no_grad():
        other.weight.fill_(7.0)
    fresh.register_for_checkpointing(Counter())
    with pytest.raises(RuntimeError, match=r"custom_checkpoint_1\.pkl.*register_for_checkpointing"):
        fresh.load_state(str(tmp_path / "ckpt"))
    assert torch.equal(other.weight, torch.full((2, 3), 7.0))
    fresh.register_for_checkpointing(Counter())
    fresh.load_state(str(tmp_path / "ckpt"))
    assert torch.equal(other.weight, model.weight)


# --- what torch accepts still loads --------------------------------------------------------------
class _Renamed(torch.nn.Module):
    """Takes the keys of an older layout through a load_state_dict pre-hook."""

    def __init__(self) -> None:
        super().__init__()
        self.new = torch.nn.Linear(2, 2)
        self._register_load_state_dict_pre_hook(self._rename)

    @staticmethod
    def _rename(state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        for key in [k for k in state_dict if k.startswith(prefix + "old.")]:
            state_dict[prefix + "new." + key[len(prefix + "old.") :]] = state_dict.pop(key)


def test_models_whose_own_loading_accepts_the_file_still_load(tmp_path: Path) -> None:
    norm = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        norm.running_mean.fill_(2.0)
    weights = {k: v for k, v in norm.state_dict().items() if k != "num_batches_tracked"}
    state = PartialState(cpu=True)
    path = save_training_state(tmp_path / "bn", state=state, models_state_dicts=[weights])
    target = torch.nn.BatchNorm1d(3)
    load_training_state(path, state=state, models=[target])  # torch fills num_batches_tracked
    assert torch.equal(target.running_mean, torch.full((3,), 2.0))

    source = torch.nn.Linear(2, 2)
    old = {f"old.{k}": v for k, v in source.state_dict().items()}
    path = save_training_state(tmp_path / "renamed", state=state, models_state_dicts=[old])
    renamed = _Renamed()
    load_training_state(path, state=state, models=[renamed])
    assert torch.equal(renamed.new.weight, source.weight)
