"""The estimate against the measured peak of both ranks of an FSDP2 run (2 gloo processes, CPU).

Each rank measures as the one-process validation does (test_validation.py): the CPU allocator's live
bytes from the profiler's allocation events during the third step, plus the parameters' and
optimizer states' local shards alive before it. FSDP2's all-gathered blocks, its reduce-scatter
buffers and gloo's copies are allocations of the process, so they are in the measurement.

Tensor parallelism is validated in test_validation_tp.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from accelerate.planning import RunLayout, estimate_memory
from accelerate.planning.shapes import shape_of_module
from tests.helpers.pool import WorkerPool
from tests.planning.tp_payload import _step_peak

transformers = pytest.importorskip("transformers")

CONFIG = {
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512,
}  # fmt: skip


def _local(tensors: Any) -> list[torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return [t.to_local() if isinstance(t, DTensor) else t for t in tensors]


def _fsdp_peak(batch: int, sequence: int) -> dict[str, int]:
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin

    torch.manual_seed(0)
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=["LlamaDecoderLayer"],
    )  # fmt: skip
    accelerator = Accelerator(fsdp_plugin=plugin)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    shape = shape_of_module(model)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    ids = torch.randint(
        0, CONFIG["vocab_size"], (batch, sequence), generator=torch.Generator().manual_seed(1)
    )

    peak = _step_peak(lambda: model(input_ids=ids, labels=ids).loss, accelerator, model, optimizer)
    layout = RunLayout(world_size=2, dp_shard=2, micro_batch_size=batch, sequence_length=sequence)
    return {"measured": peak, "estimated": estimate_memory(shape, layout).peak}


@pytest.mark.parametrize(("batch", "sequence"), [(4, 128), (8, 256)])
def test_both_ranks_of_an_fsdp2_step_peak_within_15_percent_of_the_estimate(
    pool2: WorkerPool, batch: int, sequence: int
) -> None:
    for rank, figures in enumerate(pool2.run(_fsdp_peak, batch, sequence)):
        estimated, measured = figures["estimated"], figures["measured"]
        print(f"rank {rank}: estimated {estimated}, measured {measured}")
        assert abs(estimated - measured) / measured < 0.15, (rank, estimated, measured)
