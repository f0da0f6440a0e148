"""The estimate against a measured peak: a real training step of a small decoder on CPU.

The measurement is the live bytes rebuilt from the profiler's allocation and free events
(tests/planning/allocations.py), which are exact and the same on every run: nothing here depends on
timing or on what else the machine does. The peak of the third step (optimizer states exist,
gradients were freed by ``zero_grad``) plus what was alive before it (parameters, optimizer states)
is compared with the estimate's peak, which must be within 15%.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import torch

from accelerate.planning import RunLayout, estimate_memory
from accelerate.planning.shapes import shape_of_module
from tests.planning.allocations import live_peak

transformers = pytest.importorskip("transformers")


def _live_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measured_peak(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor) -> int:
    """Bytes alive at the peak of one training step (after two warm-up steps)."""

    def step() -> None:
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    step()
    states = [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    before = _live_bytes(model.parameters()) + _live_bytes(states)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        step()
    return before + live_peak(prof.profiler.kineto_results.experimental_event_tree())  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("batch", "sequence", "optimizer"), [(4, 128, "adamw"), (2, 64, "sgd"), (8, 256, "adamw")]
)
def test_a_dense_one_process_step_peaks_within_15_percent_of_the_estimate(
    batch: int, sequence: int, optimizer: str
) -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                                      max_position_embeddings=512)  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    opt = (
        torch.optim.AdamW(model.parameters()) if optimizer == "adamw" else torch.optim.SGD(model.parameters())
    )
    measured = measured_peak(model, opt, torch.randint(0, 512, (batch, sequence)))
    layout = RunLayout(micro_batch_size=batch, sequence_length=sequence, optimizer=optimizer)
    estimated = estimate_memory(shape_of_module(model), layout).peak
    print(f"estimated {estimated}, measured {measured}")
    assert abs(estimated - measured) / measured < 0.15, (estimated, measured)
