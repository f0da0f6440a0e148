"""RegressionModel learns RegressionDataset through Accelerator (1 and 2 processes), matching raw torch."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from accelerate import Accelerator
from accelerate.test_utils import RegressionDataset, RegressionModel
from accelerate.test_utils.training import (
    MOCK_PAD_ID,
    MOCK_VOCAB_SIZE,
    mocked_dataloaders,
    mocked_dataloaders_for_autoregressive_models,
)
from tests.helpers.pool import WorkerPool

EPOCHS = 12


def _raw_training(batch_size: int) -> list[float]:
    """Plain torch: the same model, data order and optimizer, one process."""
    model = RegressionModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(RegressionDataset(length=64, seed=42), batch_size=batch_size)
    for _ in range(EPOCHS):
        for batch in loader:
            optimizer.zero_grad()
            F.mse_loss(model(batch["x"]), batch["y"]).backward()
            optimizer.step()
    return [model.a.item(), model.b.item()]


def _accelerate_training(per_process_batch: int) -> list[float]:
    accelerator = Accelerator(cpu=True)
    model = RegressionModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(RegressionDataset(length=64, seed=42), batch_size=per_process_batch)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(EPOCHS):
        for batch in loader:
            optimizer.zero_grad()
            accelerator.backward(F.mse_loss(model(batch["x"]), batch["y"]))
            optimizer.step()
    unwrapped = accelerator.unwrap_model(model)
    return [unwrapped.a.item(), unwrapped.b.item()]


def test_dataset_is_the_line_plus_noise() -> None:
    data = RegressionDataset(a=2, b=3, length=500, seed=1)
    assert len(data) == 500
    x, y = data.x, data.y
    assert x.dtype == np.float32 and y.dtype == np.float32
    residual = y - (2 * x + 3)
    assert abs(float(residual.mean())) < 0.05 and 0.05 < float(residual.std()) < 0.15
    again = RegressionDataset(length=500, seed=1)
    assert np.array_equal(again.x, x) and np.array_equal(again.y, y)
    assert set(data[0]) == {"x", "y"}
    with pytest.raises(ValueError, match="length=-1"):
        RegressionDataset(length=-1)


def test_model_forward() -> None:
    model = RegressionModel(a=2, b=1)
    x = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    assert model(x).tolist() == [1.0, 3.0, 5.0] and model(x).dtype == torch.float32
    pair = RegressionModel(a=1, b=0, double_output=True)(x)
    assert isinstance(pair, tuple) and torch.equal(pair[0], pair[1])
    assert sorted(n for n, _ in model.named_parameters()) == ["a", "b"]
    with pytest.raises(TypeError, match="needs the input"):
        model()


def test_one_process_matches_raw_torch_and_learns() -> None:
    params = _accelerate_training(per_process_batch=16)
    assert params == pytest.approx(_raw_training(batch_size=16), abs=1e-6)
    assert params == pytest.approx([2.0, 3.0], abs=0.1)


def test_two_processes_match_raw_torch_on_the_global_batch(pool2: WorkerPool) -> None:
    # Two processes of 16 see, per step, the same 32 samples as one process with a batch of 32;
    # DDP's averaged gradient is the gradient of the mean loss over those 32.
    per_rank = pool2.run(_accelerate_training, 16)
    assert per_rank[0] == per_rank[1]
    assert per_rank[0] == pytest.approx(_raw_training(batch_size=32), abs=1e-5)


def test_mocked_dataloaders() -> None:
    accelerator = Accelerator(cpu=True)
    train, evaluation = mocked_dataloaders(accelerator, batch_size=8)
    assert len(train.dataset) == 96 and len(evaluation.dataset) == 32  # type: ignore[arg-type]
    batch = next(iter(evaluation))
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape[0] == 8 and ids.shape == mask.shape and batch["labels"].shape == (8,)
    assert int(ids.max()) < MOCK_VOCAB_SIZE and torch.equal(ids == MOCK_PAD_ID, mask == 0)
    assert set(batch["labels"].tolist()) <= {0, 1}
    again = next(iter(mocked_dataloaders(accelerator, batch_size=8)[1]))
    assert torch.equal(again["input_ids"], ids)  # the same data every time (and on every process)


def test_mocked_dataloaders_pad_for_mixed_precision() -> None:
    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    for loader in mocked_dataloaders(accelerator, batch_size=4):
        assert all(batch["input_ids"].shape[1] % 8 == 0 for batch in loader)


def test_mocked_autoregressive_dataloaders() -> None:
    train, _ = mocked_dataloaders_for_autoregressive_models(Accelerator(cpu=True), batch_size=4)
    batch = next(iter(train))
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert torch.equal(batch["labels"] == -100, batch["attention_mask"] == 0)
    kept = batch["attention_mask"] == 1
    assert torch.equal(batch["labels"][kept], batch["input_ids"][kept])


def test_mocked_dataloaders_errors() -> None:
    with pytest.raises(TypeError, match="expected an Accelerator"):
        mocked_dataloaders(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size=0"):
        mocked_dataloaders(Accelerator(cpu=True), batch_size=0)


class _BagClassifier(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(MOCK_VOCAB_SIZE, 16, padding_idx=MOCK_PAD_ID)
        self.head = torch.nn.Linear(16, 2)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        summed = (self.embed(input_ids) * attention_mask[..., None]).sum(1)
        return self.head(summed / attention_mask.sum(1, keepdim=True))


def _train_on_mocked(_: int = 0) -> tuple[float, float, int]:
    """(first epoch's mean loss, last epoch's, number of evaluation samples gathered)."""
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    train, evaluation = mocked_dataloaders(accelerator, batch_size=8)
    model = _BagClassifier()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model, optimizer, train, evaluation = accelerator.prepare(model, optimizer, train, evaluation)
    epoch_losses = []
    for _ in range(6):
        losses = []
        for batch in train:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch["input_ids"], batch["attention_mask"]), batch["labels"])
            accelerator.backward(loss)
            optimizer.step()
            losses.append(loss.detach())
        epoch_losses.append(accelerator.reduce(torch.stack(losses).mean(), "mean").item())
    seen = 0
    with torch.no_grad():
        for batch in evaluation:
            seen += len(accelerator.gather_for_metrics(batch["labels"]))
    return epoch_losses[0], epoch_losses[-1], seen


def test_mocked_dataloaders_train_through_accelerator(pool2: WorkerPool) -> None:
    first, last, seen = _train_on_mocked()
    assert seen == 32 and last < first
    results = pool2.run(_train_on_mocked, 0)
    assert results[0] == results[1]  # losses are reduced across processes: every process agrees
    assert results[0][2] == 32 and results[0][1] < results[0][0]


def test_deepcopy_and_state_dict_round_trip() -> None:
    model = RegressionModel(a=1.5, b=-2)
    clone = RegressionModel()
    clone.load_state_dict(copy.deepcopy(model.state_dict()))
    assert clone.a.item() == 1.5 and clone.b.item() == -2
