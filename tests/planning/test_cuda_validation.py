"""The estimate against ``torch.cuda.max_memory_allocated`` of a dense training step on one GPU.

Marked ``cuda``: skipped without a GPU (conftest); ``make gpu-check`` runs it on a lent GPU (its
``memory_estimate`` area). The model is larger than the CPU validation's (a ~110M-parameter Llama) so
that the CUDA libraries' workspaces are small beside the step; AdamW, fp32, SDPA attention. The peak
is the caching allocator's high-water mark over the third step, everything the process holds
(parameters, optimizer states, the batch) included.
"""

from __future__ import annotations

import pytest
import torch

from accelerate.planning import RunLayout, estimate_memory
from accelerate.planning.shapes import shape_of_module

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.cuda

CONFIG = {
    "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 12,
    "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
}  # fmt: skip


@pytest.mark.parametrize(("batch", "sequence"), [(2, 512), (4, 1024)])
def test_a_dense_gpu_step_peaks_within_15_percent_of_the_estimate(batch: int, sequence: int) -> None:
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    ids = torch.randint(0, CONFIG["vocab_size"], (batch, sequence), device="cuda")

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated()
    layout = RunLayout(micro_batch_size=batch, sequence_length=sequence)
    estimated = estimate_memory(shape_of_module(model), layout).peak
    print(f"GPU {batch} x {sequence}: estimated {estimated}, measured {measured}")
    assert abs(estimated - measured) / measured < 0.15, (estimated, measured)
