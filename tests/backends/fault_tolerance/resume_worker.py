"""One process of the checkpoint checks (``test_resume_plain.py``, ``test_group_checkpoint.py``),
run under ``accelerate launch --num_processes 2``.

argv: out_dir mode [lighthouse], where mode is
``plain``: no fault tolerance; load ``out_dir/ckpt`` and train to the epoch's end;
``ft_save`` / ``ft_load``: one replica group (FSDP2 inside when launched so); ``ft_save`` saves
``out_dir/ckpt`` after SAVE_AFTER steps, ``ft_load`` loads it; both train to the epoch's end;
``gather``: one of two replica groups; an evaluation pass with ``gather_for_metrics``.
Each process writes ``{mode}_{group}_{rank}.json``: the indices each step trained, the final parameters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from accelerate import Accelerator, FaultToleranceKwargs
from tests.backends.fault_tolerance.resume_problem import (
    SAVE_AFTER,
    loss_of,
    make_loader,
    make_model,
    make_optimizer,
)


def _full(model: torch.nn.Module) -> dict[str, list[float]]:
    state = model.state_dict()
    return {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).reshape(-1).tolist() for k, v in state.items()
    }


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    handlers: list[Any] = []
    group = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if mode != "plain":
        groups = 2 if mode == "gather" else 1
        handlers.append(
            FaultToleranceKwargs(
                replica_group_id=group,
                num_replica_groups=groups,
                lighthouse_address=sys.argv[3],
                min_replicas=groups,
                timeout_s=30.0,
                quorum_timeout_s=60.0,
            )  # fmt: skip
        )
    accelerator = Accelerator(cpu=True, kwargs_handlers=handlers)
    rank = accelerator.process_index
    model = make_model()
    optimizer, scheduler = make_optimizer(model)
    if mode == "gather":
        eval_loader = make_loader(num_samples=30, shuffle=False)  # 8 batches, the last one of 2 samples
        model, eval_loader = accelerator.prepare(model, eval_loader)
        model.eval()
        gathered: list[list[int]] = []
        with torch.no_grad():
            for batch in eval_loader:
                model(batch[1])
                gathered.append(accelerator.gather_for_metrics(batch[0]).tolist())
        report: dict[str, Any] = {"gathered": gathered}
    else:
        model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, make_loader())
        if mode in ("plain", "ft_load"):
            accelerator.load_state(str(out / "ckpt"))
        report = {
            "loaded_step": scheduler.scheduler.last_epoch,
            "loaded": _full(accelerator.unwrap_model(model)),
        }
        steps: list[list[int]] = []
        for batch in loader:
            accelerator.backward(loss_of(model, batch))
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            steps.append(batch[0].tolist())
            if mode == "ft_save" and len(steps) == SAVE_AFTER:
                accelerator.save_state(str(out / "ckpt"))
        report.update(steps=steps, params=_full(accelerator.unwrap_model(model)))
    (out / f"{mode}_{group}_{rank}.json").write_text(json.dumps(report))
    accelerator.end_training()


if __name__ == "__main__":
    main()
