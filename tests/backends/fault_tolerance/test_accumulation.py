"""accumulate() under fault tolerance: each step draws G consecutive batches and exchanges once."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("torchft")

from accelerate import Accelerator, FaultToleranceKwargs  # noqa: E402
from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse  # noqa: E402


@pytest.mark.timeout(120)
def test_accumulation_trains_each_batch_once_as_one_process_would() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 3), torch.randn(32, 1))
    reference = torch.nn.Linear(3, 1)
    model = torch.nn.Linear(3, 1)
    model.load_state_dict(reference.state_dict())
    server = start_lighthouse("127.0.0.1:0", min_replicas=1)
    try:
        settings = FaultToleranceKwargs(
            lighthouse_address=lighthouse_address(server, "127.0.0.1"), timeout_s=20
        )
        accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2, kwargs_handlers=[settings])
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        prepared, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=4))
        for x, y in loader:
            with accelerator.accumulate(prepared):
                accelerator.backward(torch.nn.functional.mse_loss(prepared(x), y))
                optimizer.step()
                optimizer.zero_grad()
        records = accelerator.strategy.runtime.records
        assert [(r.batch, r.committed) for r in records] == [(0, True), (1, True), (2, True), (3, True)]
        accelerator.strategy.release()
    finally:
        server.shutdown()
    by_hand = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(4):
        for micro in range(2):
            x, y = data[(step * 2 + micro) * 4 : (step * 2 + micro + 1) * 4]
            (torch.nn.functional.mse_loss(reference(x), y) / 2).backward()
        by_hand.step()
        by_hand.zero_grad()
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(accelerator.unwrap_model(prepared).state_dict()[key], value)
