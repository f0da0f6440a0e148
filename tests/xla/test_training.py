"""The XLA backend on torch_xla's CPU device (PJRT_DEVICE=CPU): training, loaders, collectives, checkpoints.

Runs in the side environment `make test-xla` builds (torch 2.9 + torch_xla 2.9); skipped where
torch_xla is not installed (the main suite). One XLA device: multi-device CPU XLA hangs inside
torch_xla's rendezvous on this machine, so the collectives are checked as the identity they are
on one device, through torch_xla's own primitives.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

xm = pytest.importorskip("torch_xla.core.xla_model", reason="needs torch_xla (make test-xla)")

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from accelerate import Accelerator, DistributedType, GradientState  # noqa: E402
from accelerate.collectives.communicator import current_communicator  # noqa: E402
from accelerate.data_loader import MpDeviceLoaderWrapper  # noqa: E402
from accelerate.state import reset_state  # noqa: E402
from accelerate.state.xla import XLACommunicator  # noqa: E402
from accelerate.utils import (  # noqa: E402
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
)

if os.environ.get("PJRT_DEVICE") is None:
    pytest.skip(
        "set PJRT_DEVICE=CPU (make test-xla does) to run on torch_xla's CPU device", allow_module_level=True
    )


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=generator)
    y = x @ torch.tensor([1.0, -2.0, 3.0, 0.5]) + 1.0
    return TensorDataset(x, y)


def _train(cpu: bool, *, clip: bool = False) -> tuple[list[torch.Tensor], Accelerator]:
    """The README's five-line loop; returns the trained parameters (on CPU) and the Accelerator."""
    torch.manual_seed(1)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(_data(), batch_size=8)
    accelerator = Accelerator(cpu=cpu)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        accelerator.backward(loss)
        if clip:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return [p.detach().cpu() for p in model.parameters()], accelerator


@pytest.mark.parametrize("clip", [False, True])
def test_the_five_line_loop_trains_on_xla_as_on_cpu(clip: bool) -> None:
    on_xla, accelerator = _train(False, clip=clip)
    assert accelerator.distributed_type == DistributedType.XLA and accelerator.device.type == "xla"
    reset_state()
    on_cpu, cpu_accelerator = _train(True, clip=clip)
    assert cpu_accelerator.device.type == "cpu"
    for xla_param, cpu_param in zip(on_xla, on_cpu, strict=True):
        # XLA's CPU backend fuses and reorders float32 arithmetic: equal up to rounding.
        torch.testing.assert_close(xla_param, cpu_param, rtol=1e-4, atol=1e-5)


def test_prepared_loaders_yield_xla_tensors() -> None:
    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(_data(), batch_size=16))
    assert isinstance(loader, MpDeviceLoaderWrapper) and len(loader) == 3
    batches = list(loader)
    assert len(batches) == 3 and all(t.device.type == "xla" for batch in batches for t in batch)
    torch.testing.assert_close(torch.cat([b[0].cpu() for b in batches]), _data().tensors[0])
    # The last batch is known while it is handed out, as on any prepared loader (not read ahead).
    state = GradientState()
    ends = []
    for _ in loader:
        ends.append(state.end_of_dataloader)
    assert ends == [False, False, True]


def test_device_placement_false_leaves_batches_on_the_host() -> None:
    accelerator = Accelerator()
    loader = accelerator.prepare_data_loader(DataLoader(_data(), batch_size=16), device_placement=False)
    assert not isinstance(loader, MpDeviceLoaderWrapper)
    assert next(iter(loader))[0].device.type == "cpu"


def test_collectives_are_the_identity_on_one_device() -> None:
    accelerator = Accelerator()
    assert isinstance(current_communicator(), XLACommunicator)
    t = torch.arange(6.0).reshape(3, 2).to(accelerator.device)
    for result in (
        gather(t),
        reduce(t, "sum"),
        reduce(t, "mean"),
        broadcast(t.clone()),
        pad_across_processes(t),
    ):
        assert result.device.type == "xla"
        torch.testing.assert_close(result.cpu(), t.cpu())
    assert gather_object({"a": 1}) == [{"a": 1}]
    assert broadcast_object_list([1, "x"]) == [1, "x"]
    accelerator.wait_for_everyone()


def test_torch_xla_primitives_run_on_one_device() -> None:
    # The primitives themselves, not just the one-process shortcut in front of them.
    accelerator = Accelerator()
    comm = XLACommunicator(world_size=1, rank=0, device=accelerator.device)
    t = torch.arange(4.0).to(accelerator.device)
    torch.testing.assert_close(comm.all_gather(t).cpu(), torch.arange(4.0))
    summed = t.clone()
    comm.all_reduce_sum_(summed)
    torch.testing.assert_close(summed.cpu(), torch.arange(4.0))
    sent = t.clone()
    comm.broadcast_(sent, src=0)
    torch.testing.assert_close(sent.cpu(), torch.arange(4.0))
    assert comm.all_gather_objects(("x", 1)) == [("x", 1)]
    objects = [1, 2]
    comm.broadcast_objects_(objects, src=0)
    assert objects == [1, 2]
    comm.barrier()


def test_clipping_marks_gradients_synced_until_the_step() -> None:
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    accelerator.backward(model(torch.ones(3, 2, device=accelerator.device)).sum())
    state = GradientState()
    assert not state.is_xla_gradients_synced
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    assert state.is_xla_gradients_synced
    optimizer.step()
    assert not state.is_xla_gradients_synced


def test_save_state_load_state_round_trip(tmp_path: Path) -> None:
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loader = DataLoader(_data(), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, _ in loader:
        accelerator.backward(model(x).sum())
        optimizer.step()
        optimizer.zero_grad()
    saved = {k: v.cpu().clone() for k, v in model.state_dict().items()}
    saved_opt = optimizer.state_dict()["state"][0]["exp_avg"].cpu().clone()
    path = accelerator.save_state(str(tmp_path / "ckpt"))
    # Written from CPU copies (torch_xla's xm.save): loadable where there is no XLA device.
    on_disk = torch.load(Path(path) / "optimizer.bin", weights_only=False)
    assert on_disk["state"][0]["exp_avg"].device.type == "cpu"
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    accelerator.load_state(path)
    for key, value in model.state_dict().items():
        assert value.device.type == "xla"
        torch.testing.assert_close(value.cpu(), saved[key])
    torch.testing.assert_close(optimizer.state_dict()["state"][0]["exp_avg"].cpu(), saved_opt)
    assert optimizer.state_dict()["state"][0]["exp_avg"].device.type == "xla"


def test_save_model_writes_cpu_weights(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(3, 3))
    accelerator.save_model(model, str(tmp_path))
    weights = load_file(str(tmp_path / "model.safetensors"))
    torch.testing.assert_close(weights["weight"], model.weight.detach().cpu())


def test_skip_first_batches_keeps_feeding_the_device() -> None:
    accelerator = Accelerator()
    loader = accelerator.prepare(DataLoader(_data(), batch_size=16))
    rest = accelerator.skip_first_batches(loader, 2)
    assert isinstance(rest, MpDeviceLoaderWrapper)
    batches = list(rest)
    assert len(batches) == 1 and batches[0][0].device.type == "xla"
    torch.testing.assert_close(batches[0][0].cpu(), _data().tensors[0][32:])
