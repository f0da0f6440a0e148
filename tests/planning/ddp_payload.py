"""Rank functions for the DDP memory validation (top-level: the pool sends them by name).

DDP's reducer allocates its gradient buckets when ``prepare`` wraps the model, before any step, so the
whole run is profiled from before the model is built (as zero_payload.py does) and the peak is taken
over the third step's allocations: the buckets, the parameters and the optimizer states are then
allocations of the profile, not something to add from outside.
"""

from __future__ import annotations

import torch

from tests.planning.allocations import profiled_run, three_steps
from tests.planning.tp_payload import CONFIG


def ddp_peak(batch: int, sequence: int, bucket_view: bool = False) -> dict[str, int]:
    """One rank's measured peak of a plain DDP AdamW step of the small Llama (``Accelerator()`` on the
    pool's processes, no parallelism config), and the estimate for ``dp_replicate`` = the world size.

    ``bucket_view``: DDP's ``gradient_as_bucket_view`` (the gradients are views into the buckets)."""
    import transformers

    from accelerate import Accelerator
    from accelerate.planning import RunLayout, estimate_memory
    from accelerate.planning.shapes import shape_of_module
    from accelerate.utils import DistributedDataParallelKwargs

    ids = torch.randint(
        0, CONFIG["vocab_size"], (batch, sequence), generator=torch.Generator().manual_seed(1)
    )
    with profiled_run() as run:
        kwargs = DistributedDataParallelKwargs(gradient_as_bucket_view=bucket_view)
        accelerator = Accelerator(kwargs_handlers=[kwargs])
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
        shape = shape_of_module(model)
        model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))

        def step() -> None:
            accelerator.backward(model(input_ids=ids, labels=ids).loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        three_steps(step)
    layout = RunLayout(
        world_size=accelerator.num_processes, dp_replicate=accelerator.num_processes,
        micro_batch_size=batch, sequence_length=sequence,
    )  # fmt: skip
    estimate = estimate_memory(shape, layout)
    return {
        "measured": run.peak,
        "estimated": estimate.peak,
        "distributed_type": str(accelerator.distributed_type),
        "bucket_view": int(model.gradient_as_bucket_view),
        **vars(estimate.groups[0].memory),
    }
