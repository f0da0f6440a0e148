"""One rank of the DeepSpeed ZeRO-2 step benchmark (``torchrun --nproc_per_node 2``, DS_ACCELERATOR=cpu).

Usage: torchrun ... deepspeed_worker.py --out DIR --t0 T
Builds two ZeRO-2 engines over the same model and data: one with ``deepspeed.initialize`` and the
raw loop (``engine(x)``, ``engine.backward``, ``engine.step``), one through ``Accelerator.prepare``
and the five-line loop. The loops alternate optimizer step by optimizer step (the shared
``interleave`` in ``common.py``); CPU seconds per optimizer step go to DIR/rank{N}.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench._workers.common import (  # noqa: E402
    Loop,
    accelerate_micro_steps,
    adamw_prepared,
    interleave_accumulations,
    parse_args,
)
from bench._workers.ddp_worker import NUM_BATCHES, make_batches, make_model  # noqa: E402
from bench.common import write_worker_result  # noqa: E402

CONFIG = {
    "train_micro_batch_size_per_gpu": 64,
    "gradient_accumulation_steps": 1,
    "gradient_clipping": 0.0,
    "zero_optimization": {"stage": 2},
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 2**62,
}


def raw_loop() -> Loop:
    import deepspeed

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=CONFIG, dist_init_required=False
    )
    batches = make_batches(dist.get_rank())

    def run(steps: int, accum: int) -> None:
        for i in range(steps):
            x, y = batches[i % NUM_BATCHES]
            engine.backward(F.cross_entropy(engine(x), y))
            engine.step()

    return run


def accelerate_loop() -> Loop:
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=dict(CONFIG)))
    model, optimizer = adamw_prepared(accelerator, make_model())
    batches = make_batches(accelerator.process_index)

    def run(steps: int, accum: int) -> None:
        accelerate_micro_steps(accelerator, model, optimizer, batches, steps)  # the config accumulates 1

    return run


def main() -> None:
    args = parse_args(argparse.ArgumentParser())
    torch.set_num_threads(1)
    accel = accelerate_loop()  # creates the process group through accelerate; the raw engine reuses it
    raw = raw_loop()
    result = interleave_accumulations(raw, accel, (1,), args.steps, args.repeats)
    write_worker_result(args.out, dist.get_rank(), result)
    dist.barrier()


if __name__ == "__main__":
    main()
