"""Tiny models and data for tests: a linear regression pair, and synthetic text-classification loaders.

``RegressionDataset`` draws ``y = a * x + b + noise`` and ``RegressionModel`` learns ``a`` and ``b``:
small enough to train in milliseconds, exact enough to compare one process against several.

``mocked_dataloaders`` stands in for an example script's ``get_dataloaders(accelerator, batch_size)``
(which tokenizes a GLUE dataset from the Hub) with synthetic token ids, so example scripts run offline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

if TYPE_CHECKING:
    from accelerate.accelerator import Accelerator

# Token ids of the synthetic text data: 0 pads, content ids are 1..MOCK_VOCAB_SIZE-1. Small enough for
# the tiny configurations test suites build (vocab_size=99 is common), so any model embeds them.
MOCK_VOCAB_SIZE = 99
MOCK_PAD_ID = 0
_MOCK_TRAIN_LENGTH = 96
_MOCK_EVAL_LENGTH = 32


class RegressionDataset(Dataset[dict[str, Any]]):
    """``length`` samples ``{"x": x, "y": a * x + b + noise}`` with ``x ~ N(0, 1)`` and noise ``N(0, 0.1)``.

    Values are float32 numpy scalars (the default collate makes float32 tensors). ``seed`` fixes the
    draw; processes that build it with the same seed see the same data.

    Example::

        loader = DataLoader(RegressionDataset(length=80, seed=42), batch_size=16)
    """

    def __init__(self, a: float = 2, b: float = 3, length: int = 64, seed: int | None = None) -> None:
        if length < 0:
            raise ValueError(f"RegressionDataset(length={length}): length must be >= 0")
        rng = np.random.default_rng(seed)
        self.length = length
        self.x = rng.normal(size=(length,)).astype(np.float32)
        self.y = (a * self.x + b + rng.normal(scale=0.1, size=(length,))).astype(np.float32)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": self.x[i], "y": self.y[i]}


class RegressionModel(nn.Module):
    """``forward(x) = x * a + b`` with two scalar parameters ``a`` and ``b``.

    ``double_output=True`` returns the prediction twice, as a tuple (for code that handles
    several outputs). Inputs are cast to the parameters' dtype, so a float64 ``x`` works with a
    float32 model.
    """

    def __init__(self, a: float = 0, b: float = 0, double_output: bool = False) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(float(a)))
        self.b = nn.Parameter(torch.tensor(float(b)))
        self.double_output = double_output

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if x is None:
            raise TypeError("RegressionModel.forward(x) needs the input tensor x")
        y = x.to(self.a.dtype) * self.a + self.b
        return (y, y) if self.double_output else y


# --- synthetic text data ------------------------------------------------------------------------
class _TokenDataset(Dataset[dict[str, Any]]):
    """Sequences of token ids with a label each; a fixed seed, so every process sees the same data."""

    def __init__(self, length: int, seed: int, autoregressive: bool) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.samples: list[dict[str, Any]] = []
        for _ in range(length):
            n = int(torch.randint(8, 33, (1,), generator=gen))
            ids = torch.randint(1, MOCK_VOCAB_SIZE, (n,), generator=gen)
            sample: dict[str, Any] = {"input_ids": ids}
            if not autoregressive:
                # Learnable even by a bag of words: are most tokens in the upper half of the vocabulary?
                sample["labels"] = int(2 * int((ids >= MOCK_VOCAB_SIZE // 2).sum()) > n)
            self.samples.append(sample)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.samples[i]


class _PadCollator:
    """Pads a batch to its longest sequence (rounded up to ``multiple``); a class so it pickles."""

    def __init__(self, multiple: int | None, autoregressive: bool) -> None:
        self.multiple = multiple
        self.autoregressive = autoregressive

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(s["input_ids"]) for s in samples)
        if self.multiple:
            longest = -(-longest // self.multiple) * self.multiple
        input_ids = torch.full((len(samples), longest), MOCK_PAD_ID, dtype=torch.long)
        attention_mask = torch.zeros((len(samples), longest), dtype=torch.long)
        for row, sample in enumerate(samples):
            n = len(sample["input_ids"])
            input_ids[row, :n] = sample["input_ids"]
            attention_mask[row, :n] = 1
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.autoregressive:
            batch["labels"] = input_ids.masked_fill(attention_mask == 0, -100)  # pads are not predicted
        else:
            batch["token_type_ids"] = torch.zeros_like(input_ids)
            batch["labels"] = torch.tensor([s["labels"] for s in samples], dtype=torch.long)
        return batch


def _pad_multiple(accelerator: Accelerator) -> int | None:
    """Sequence lengths that suit the precision's kernels: 16 for fp8, 8 for fp16/bf16, else none."""
    precision = str(getattr(accelerator, "mixed_precision", "no"))
    return {"fp8": 16, "fp16": 8, "bf16": 8}.get(precision)


def _mocked(
    accelerator: Accelerator, batch_size: int, autoregressive: bool
) -> tuple[DataLoader[Any], DataLoader[Any]]:
    if not hasattr(accelerator, "mixed_precision"):
        raise TypeError(f"expected an Accelerator as the first argument, got {type(accelerator).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: must be >= 1")
    collate = _PadCollator(_pad_multiple(accelerator), autoregressive)
    train = _TokenDataset(_MOCK_TRAIN_LENGTH, seed=0, autoregressive=autoregressive)
    evaluation = _TokenDataset(_MOCK_EVAL_LENGTH, seed=1, autoregressive=autoregressive)
    train_loader = DataLoader(train, batch_size=batch_size, shuffle=True, collate_fn=collate)
    eval_loader = DataLoader(evaluation, batch_size=batch_size, shuffle=False, collate_fn=collate)
    return train_loader, eval_loader


def mocked_dataloaders(
    accelerator: Accelerator, batch_size: int = 16
) -> tuple[DataLoader[Any], DataLoader[Any]]:
    """Train and eval loaders of synthetic sequence-classification batches (offline stand-in for GLUE/MRPC).

    Each batch is a dict of ``input_ids``, ``token_type_ids``, ``attention_mask`` (padded with
    ``MOCK_PAD_ID``, ids below ``MOCK_VOCAB_SIZE``) and two-class ``labels``; 96 training and 32
    evaluation samples, the same on every process. The loaders are not prepared: pass them to
    ``accelerator.prepare`` as the example scripts do.
    """
    return _mocked(accelerator, batch_size, autoregressive=False)


def mocked_dataloaders_for_autoregressive_models(
    accelerator: Accelerator, batch_size: int = 16
) -> tuple[DataLoader[Any], DataLoader[Any]]:
    """Train and eval loaders of synthetic causal-language-modelling batches.

    Each batch is a dict of ``input_ids``, ``attention_mask`` and ``labels`` (the input ids, -100 on
    padding). Ids are below ``MOCK_VOCAB_SIZE``; the loaders are not prepared.
    """
    return _mocked(accelerator, batch_size, autoregressive=True)
