"""save_state records the replica-group layout and the committed position; load_state resumes it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("torchft")

from accelerate import Accelerator, FaultToleranceKwargs  # noqa: E402
from accelerate.backends.fault_tolerance.manager import lighthouse_address, start_lighthouse  # noqa: E402


@pytest.mark.timeout(120)
def test_save_state_records_the_layout_and_load_state_resumes_the_position(tmp_path: Path) -> None:
    server = start_lighthouse("127.0.0.1:0", min_replicas=1)
    try:
        settings = FaultToleranceKwargs(
            lighthouse_address=lighthouse_address(server, "127.0.0.1"), timeout_s=20
        )
        accelerator = Accelerator(cpu=True, kwargs_handlers=[settings], project_dir=str(tmp_path))
        model = torch.nn.Linear(3, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = DataLoader(TensorDataset(torch.randn(24, 3), torch.randn(24, 1)), batch_size=4)
        model, optimizer, data = accelerator.prepare(model, optimizer, data)
        batches = iter(data)
        for _ in range(2):
            x, y = next(batches)
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        saved = accelerator.save_state(str(tmp_path / "ckpt"))
        state = data.state_dict()
        layout = {
            key: state["fault_tolerance"][key]
            for key in ("replica_group_id", "num_replica_groups", "min_replicas")
        }
        assert layout == {"replica_group_id": 0, "num_replica_groups": 1, "min_replicas": 1}
        position = state["fault_tolerance"]
        assert (position["step"], position["batches_committed"], state["samples_consumed"]) == (2, 2, 8)
        weights = {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
        x, y = next(batches)  # one more committed step, then back to the checkpoint
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
        assert data.state_dict()["fault_tolerance"]["batches_committed"] == 3
        accelerator.load_state(saved)
        position = data.state_dict()["fault_tolerance"]
        assert position["step"] == 2 and position["batches_committed"] == 2
        for key, value in accelerator.unwrap_model(model).state_dict().items():
            assert torch.equal(value, weights[key])
        with pytest.raises(ValueError, match="saved without fault tolerance"):
            data.load_state_dict({"samples_consumed": 0})
        accelerator.strategy.release()
    finally:
        server.shutdown()
