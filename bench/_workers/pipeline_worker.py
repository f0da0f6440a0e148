"""One rank of the pipeline-parallel benchmark (started by torchrun on 2 processes).

A hand-written ``torch.distributed.pipelining`` loop (trace with ``pipeline()``, ``build_stage``,
``Schedule1F1B`` with the loss, an optimizer over the stage) and the same model through
``Accelerator(parallelism_config=ParallelismConfig(pp_size=2, ...))`` run in the same processes and
alternate optimizer step by optimizer step. Then each schedule's action table as torch built it for
the prepared model (``schedule.pipeline_order``: per rank, its actions in order), for the bench to
count the bubble from. Writes DIR/rank{N}.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # torchrun runs this file as a script

from bench._workers.common import Step, interleave, parse_args, run_rank  # noqa: E402

WIDTH, BATCH, DEPTH, CHUNKS = 256, 16, 4, 4


def make_model() -> nn.Module:
    torch.manual_seed(0)
    blocks = [
        nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
        for _ in range(DEPTH)
    ]
    return nn.Sequential(*blocks)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, WIDTH, generator=gen), torch.randn(BATCH, WIDTH, generator=gen)


def raw_loop(share_loss: bool = False) -> Step:
    """The hand-written loop; with ``share_loss``, it also does what the prepared model promises on
    top: the batch's mean loss from the last stage on every rank (a blocking broadcast each step)."""
    from torch.distributed.pipelining import Schedule1F1B, SplitPoint, pipeline

    model = make_model()
    x, y = data()
    pipe = pipeline(
        model, mb_args=(x[: BATCH // CHUNKS],), split_spec={str(DEPTH // 2): SplitPoint.BEGINNING}
    )
    stage = pipe.build_stage(dist.get_rank(), device=torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=CHUNKS, loss_fn=F.mse_loss)
    optimizer = torch.optim.AdamW(stage.submod.parameters(), lr=1e-3)

    last = dist.get_world_size() - 1

    def run() -> None:
        losses: list[torch.Tensor] = []
        if dist.get_rank() == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=losses)
        if share_loss:
            loss = torch.stack(losses).mean() if losses else torch.zeros(())
            dist.broadcast(loss, group_src=last)
        optimizer.step()
        optimizer.zero_grad()

    return run


def accelerate_loop(schedule: str = "1F1B") -> Step:
    return _accelerate_parts(schedule)[0]


def _accelerate_parts(schedule: str) -> tuple[Step, Any]:
    from accelerate import Accelerator
    from accelerate.state import reset_state
    from accelerate.utils import ParallelismConfig

    reset_state()
    config = ParallelismConfig(pp_size=2, pp_schedule=schedule, pp_microbatches=CHUNKS, pp_loss_fn=F.mse_loss)
    accelerator = Accelerator(cpu=True, parallelism_config=config)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = data()

    def run() -> None:
        accelerator.backward(model(x, labels=y))
        optimizer.step()
        optimizer.zero_grad()

    return run, model


def action_table(schedule: str) -> dict[str, list[tuple[str, int, int]]]:
    """The actions of ``schedule``'s step on every rank, in torch's order (``pipeline_order``): each
    one's computation type name (FORWARD, FULL_BACKWARD, REDUCE_GRAD, ...), stage and micro-batch."""
    run, model = _accelerate_parts(schedule)
    run()  # the first step traces and cuts the model: the schedule exists from then on
    order = model.schedule.pipeline_order
    return {
        str(rank): [
            (a.computation_type.name, a.stage_index, a.microbatch_index) for a in actions if a is not None
        ]
        for rank, actions in order.items()
    }


def main() -> None:
    args = parse_args(argparse.ArgumentParser())

    def measure() -> dict[str, Any]:
        out: dict[str, Any] = interleave(raw_loop(), accelerate_loop(), args.steps, args.repeats)
        same = interleave(raw_loop(share_loss=True), accelerate_loop(), args.steps, args.repeats)
        out["raw_same"], out["accel_same"] = same["raw"], same["accel"]
        for schedule in ("GPipe", "1F1B", "Interleaved1F1B"):
            out[f"actions {schedule}"] = action_table(schedule)
        return out

    run_rank(args.out, measure)


if __name__ == "__main__":
    main()
