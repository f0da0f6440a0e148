"""The self-check's training and save/load checks under a pipeline-parallel config (``pp_size > 1``).

A pipeline trains inside its schedule: the loss is given once (``ParallelismConfig.pp_loss_fn``) and
the labels go to the model call, so the regression check becomes a stack of small linear blocks
the pipeline cuts into stages, trained with ``loss = model(x, labels=y)`` and compared with the
same stack trained in one process.
"""

from __future__ import annotations

from typing import Any

import torch


def pipelined(acc: Any) -> bool:
    config = getattr(acc, "parallelism_config", None)
    return config is not None and bool(config.pp_enabled)


def _stack(blocks: int) -> torch.nn.Module:
    """Linear blocks (3 -> 8 -> ... -> 8 -> 1): one or more per stage."""
    torch.manual_seed(42)
    layers: list[torch.nn.Module] = [torch.nn.Linear(3, 8)]
    layers += [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()) for _ in range(blocks - 2)]
    layers.append(torch.nn.Linear(8, 1))
    return torch.nn.Sequential(*layers)


def _data(samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 3, generator=generator)
    return x, x @ torch.tensor([[2.0], [-1.0], [0.5]]) + 0.3


def check_pipeline_training(acc: Any) -> tuple[str, Any]:
    """Trains the stack under the pipeline and compares it with one process; returns (detail, trained)."""
    from torch.utils.data import DataLoader, TensorDataset

    from accelerate.state.pipeline_options import microbatches, stages_per_rank

    config = acc.parallelism_config
    config.pp_loss_fn = torch.nn.functional.mse_loss  # the one thing a pipeline adds to the loop
    blocks = max(3, int(config.pp_size) * stages_per_rank(config))
    per_process = 2 * microbatches(config)
    shards = int(config.data_parallel_size)
    x, y = _data(4 * per_process * shards)
    model = _stack(blocks)
    # With momentum: an optimizer with state (a stateless one does not reload after the cut; see the docs).
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=per_process)
    model, optimizer, loader = acc.prepare(model, optimizer, loader)
    for inputs, targets in loader:
        acc.backward(model(inputs, labels=targets))
        optimizer.step()
        optimizer.zero_grad()
    ours = acc.get_state_dict(model)
    reference = _stack(blocks)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    batch = per_process * shards
    for start in range(0, len(x), batch):
        torch.nn.functional.mse_loss(reference(x[start : start + batch]), y[start : start + batch]).backward()
        ref_optimizer.step()
        ref_optimizer.zero_grad()
    for name, value in reference.state_dict().items():
        if not torch.allclose(ours[name].cpu(), value, atol=1e-5):
            raise AssertionError(f"{name} {ours[name].tolist()} differs from the 1-process {value.tolist()}")
    detail = (
        f"{len(loader)} steps of a {config.pp_schedule} pipeline of {blocks} blocks over pp={config.pp_size} "
        "match the 1-process reference"
    )
    return detail, (model, optimizer)


def check_pipeline_save_load(acc: Any, model: Any, optimizer: Any, folder: str) -> None:
    """save_state, disturb what this rank trains, load_state: this rank's stages are back as saved."""
    del model  # its stages are what the optimizer steps

    def local(param: torch.Tensor) -> torch.Tensor:  # a shard's own piece (no collective)
        to_local = getattr(param, "to_local", None)
        return (to_local() if callable(to_local) else param).detach().clone()

    params = [p for group in optimizer.param_groups for p in group["params"]]
    acc.save_state(folder)
    acc.wait_for_everyone()
    saved = [local(p) for p in params]
    with torch.no_grad():
        for param in params:
            param.add_(1.0)
    acc.load_state(folder)
    if not all(torch.equal(a, local(p)) for a, p in zip(saved, params, strict=True)):
        raise AssertionError("load_state did not restore the saved pipeline stages")
