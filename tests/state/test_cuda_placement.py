"""Device placement on a CUDA GPU: the Accelerator's device, prepared models, batches and optimizer state.

Marked ``cuda``: skipped without a GPU (conftest); ``make gpu-check`` runs them on a lent GPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator, PartialState
from tests.training_helpers import make_model

pytestmark = pytest.mark.cuda


def _loader() -> DataLoader:
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(32, 8, generator=gen), torch.randn(32, 2, generator=gen))
    return DataLoader(data, batch_size=8)


def test_one_process_runs_on_the_first_gpu() -> None:
    state = PartialState()
    assert state.device == torch.device("cuda", 0)
    assert state.num_processes == 1
    assert Accelerator().device == torch.device("cuda", 0)


def test_prepare_places_model_batches_and_optimizer_state_on_the_gpu() -> None:
    accelerator = Accelerator()
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _loader())
    assert all(p.device.type == "cuda" for p in model.parameters())
    for x, y in loader:
        assert x.device.type == "cuda" and y.device.type == "cuda"
        optimizer.zero_grad()
        accelerator.backward(F.mse_loss(model(x), y))
        optimizer.step()
    states = [s for s in optimizer.state_dict()["state"].values()]
    assert states and all(s["exp_avg"].device.type == "cuda" for s in states)
    gathered = accelerator.gather(torch.arange(3, device=accelerator.device))
    assert gathered.device.type == "cuda" and gathered.tolist() == [0, 1, 2]


def test_device_placement_false_leaves_the_model_where_it_is() -> None:
    accelerator = Accelerator(device_placement=False)
    model = accelerator.prepare(make_model())
    assert all(p.device.type == "cpu" for p in model.parameters())
    batches = accelerator.prepare(_loader())
    x, _ = next(iter(batches))
    assert x.device.type == "cpu"
