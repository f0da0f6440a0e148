"""Rank functions for the DeepSpeed ZeRO memory validation (top-level: the pool sends them by name).

DeepSpeed keeps copies the model's parameters do not show (a flat fp32 partition for the optimizer,
gradient partitions, bucket buffers), so the whole run is profiled from before the model is built:
the live bytes rebuilt from its allocation events (tests/planning/allocations.py) then count
everything the process allocated since, and the peak is taken over the third step's allocations.
"""

from __future__ import annotations

from typing import Any

import torch

from tests.planning.allocations import profiled_run, three_steps
from tests.planning.tp_payload import CONFIG


def _plugin(stage: int, buckets: str) -> Any:
    from accelerate.utils import DeepSpeedPlugin

    if buckets == "default":  # DeepSpeed's own bucket sizes (500M elements)
        return DeepSpeedPlugin(zero_stage=stage)
    # What a transformers model's config fills "auto" with (hidden_size**2 and friends).
    zero = {"stage": stage, "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto"}  # fmt: skip
    config = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": 1, "gradient_clipping": 0.0, "zero_optimization": zero}  # fmt: skip
    return DeepSpeedPlugin(hf_ds_config=config)


def zero_peak(stage: int, batch: int, sequence: int, buckets: str = "auto") -> dict[str, int]:
    """One rank's measured peak of a ZeRO-``stage`` AdamW step of the small Llama, and the estimate.

    ``buckets``: ``"auto"`` (the sizes accelerate fills from the model's hidden size) or ``"default"``.
    """
    import transformers
    from torch.utils.data import DataLoader

    from accelerate import Accelerator
    from accelerate.planning import RunLayout, estimate_memory
    from accelerate.planning.shapes import shape_of_module

    ids = torch.randint(
        0, CONFIG["vocab_size"], (batch, sequence), generator=torch.Generator().manual_seed(1)
    )
    with profiled_run() as run:
        accelerator = Accelerator(deepspeed_plugin=_plugin(stage, buckets))
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
        shape = shape_of_module(model)
        loader = DataLoader(range(2 * batch), batch_size=batch)  # sets the engine's micro-batch size
        model, optimizer, _ = accelerator.prepare(model, torch.optim.AdamW(model.parameters()), loader)

        def step() -> None:
            accelerator.backward(model(input_ids=ids, labels=ids).loss)
            optimizer.step()
            optimizer.zero_grad()

        three_steps(step)
    peak = run.peak
    bucket = CONFIG["hidden_size"] ** 2 if buckets == "auto" else 500_000_000
    world = accelerator.num_processes  # ZeRO partitions over every process: dp_shard is the world
    layout = RunLayout(world_size=world, dp_shard=world, zero_stage=stage, micro_batch_size=batch,
                       sequence_length=sequence, zero_bucket_size=bucket)  # fmt: skip
    estimate = estimate_memory(shape, layout)
    return {
        "measured": peak,
        "estimated": estimate.peak,
        **{k: v for k, v in vars(estimate.groups[0].memory).items()},
    }
