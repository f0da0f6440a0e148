"""One process of a replica group that runs HSDP inside (``test_hsdp.py``): 4 processes,
``ParallelismConfig(dp_replicate_size=2, dp_shard_size=2)``, the five-line loop unchanged.

argv: out_dir lighthouse (the group id and count come from ``accelerate launch --ft_*``). Group 1
starts from other weights than group 0, so at the first quorum one group heals from the other
(torchft's ``init_sync``), each process its own shard. It trains STEPS committed steps, saves its state and
writes ``hsdp_{group}_{rank}.json``: the steps it committed, its healing time, its full parameters,
its learning rate and the replica-group layout its checkpoint recorded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from accelerate import Accelerator, ParallelismConfig
from tests.backends.fault_tolerance.problem import (
    loss_of,
    make_loader,
    make_model,
    make_optimizer,
    make_scheduler,
)

STEPS = 4


def main() -> None:
    out = Path(sys.argv[1])
    accelerator = Accelerator(
        cpu=True, parallelism_config=ParallelismConfig(dp_replicate_size=2, dp_shard_size=2)
    )
    runtime = accelerator.strategy.runtime
    group = runtime.settings.replica_group_id
    model = make_model()
    if group == 1:
        with torch.no_grad():  # other weights: only healing from group 0 makes the groups equal
            for param in model.parameters():
                param.add_(1.0)
    optimizer = make_optimizer(model)
    model, optimizer, scheduler, loader = accelerator.prepare(
        model, optimizer, make_scheduler(optimizer), make_loader()
    )
    for batch in loader:
        accelerator.backward(loss_of(model, batch))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if sum(1 for record in runtime.records if record.committed) == STEPS:
            break
    saved = Path(accelerator.save_state(str(out / f"ckpt_{group}")))
    layout = loader.state_dict()["fault_tolerance"]["group_layout"]
    full = {
        k: v.full_tensor() if isinstance(v, DTensor) else v
        for k, v in accelerator.unwrap_model(model).state_dict().items()
    }
    result = {
        "records": [record.as_dict() for record in runtime.records],
        "heal_s": runtime.last_heal_s,
        "sharded": runtime.sharded,
        "params": {k: v.detach().reshape(-1).tolist() for k, v in full.items()},
        "lr": scheduler.get_last_lr()[0],
        "layout": layout,
        "saved": str(saved),
    }
    (out / f"hsdp_{group}_{accelerator.process_index}.json").write_text(json.dumps(result))
    accelerator.strategy.release()


if __name__ == "__main__":
    main()
