"""notebook_launcher / debug_launcher: real processes started from this (test) process."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from accelerate.launch.checks import LaunchError
from accelerate.launch.in_process import LaunchedProcessError, debug_launcher, notebook_launcher
from tests.commands.helpers import reserved_port


def train(out: str) -> None:
    """A training function as a notebook would define it: the Accelerator is created inside."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accelerate import Accelerator

    accelerator = Accelerator()
    x = torch.arange(16, dtype=torch.float32).reshape(8, 2) / 8
    y = x.sum(dim=1, keepdim=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, DataLoader(TensorDataset(x, y), batch_size=2)
    )
    for inputs, targets in loader:
        optimizer.zero_grad()
        accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets))
        optimizer.step()
    record = {
        "world": accelerator.num_processes,
        "mixed_precision": os.environ.get("ACCELERATE_MIXED_PRECISION"),
        "accelerator_precision": accelerator.mixed_precision,
        "params": [
            v for p in accelerator.unwrap_model(model).parameters() for v in p.detach().flatten().tolist()
        ],
    }
    Path(out, f"rank{accelerator.process_index}.json").write_text(json.dumps(record))


def fail_on_rank_one() -> None:
    from accelerate import PartialState

    if PartialState().process_index == 1:
        raise KeyError("rank one cannot find its key")
    PartialState().wait_for_everyone()


def test_notebook_launcher_trains_on_two_processes(tmp_path: Path) -> None:
    import signal

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with reserved_port() as port:
        notebook_launcher(
            train, (str(tmp_path),), num_processes=2, mixed_precision="bf16", use_port=str(port)
        )
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["params"] == ranks[1]["params"]  # DDP kept the replicas identical
    assert ranks[0]["mixed_precision"] == "bf16" and ranks[1]["accelerator_precision"] == "bf16"
    # torch's elastic agent installs its own signal handlers; the notebook's must be back afterwards.
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


def test_notebook_launcher_with_the_function_alone_runs_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notebook_launcher(train, (str(tmp_path),))
    assert json.loads((tmp_path / "rank0.json").read_text())["world"] == 1
    assert "num_processes=N" in capsys.readouterr().out
    from accelerate.state import reset_state

    reset_state()


def test_debug_launcher_reports_the_failing_rank() -> None:
    with pytest.raises(LaunchedProcessError) as info:
        debug_launcher(fail_on_rank_one, num_processes=2)
    message = str(info.value)
    assert "rank 1" in message and "KeyError: 'rank one cannot find its key'" in message
    assert "fail_on_rank_one" in message


def test_refuses_when_state_exists_in_the_parent() -> None:
    from accelerate import PartialState

    PartialState(cpu=True)
    with pytest.raises(RuntimeError, match="already created in this process"):
        notebook_launcher(train, ("unused",), num_processes=2)


def test_bad_arguments_fail_through_the_launch_checks() -> None:
    # The same checks (and LaunchError, a ValueError) as `accelerate launch`, naming the argument.
    with pytest.raises(LaunchError, match=r"notebook_launcher\(mixed_precision=...\).*'fp32' is not a mixed"):
        notebook_launcher(train, ("unused",), mixed_precision="fp32")
    with pytest.raises(ValueError, match=r"num_processes=0 \(from debug_launcher\(num_processes=...\)\)"):
        debug_launcher(train, num_processes=0)


def collect_then_wait() -> None:
    import gc

    from accelerate import PartialState

    gc.collect()  # whatever garbage the parent had when it forked is torn down here, in the child
    PartialState().wait_for_everyone()


@pytest.mark.timeout(120)
def test_a_failed_launch_leaves_nothing_the_next_one_trips_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from accelerate.launch import in_process
    from accelerate.utils.ports import port_is_free

    ports: list[int] = []
    find_free_port = in_process.find_free_port

    def recording_free_port() -> int:
        ports.append(find_free_port())
        return ports[-1]

    monkeypatch.setattr(in_process, "find_free_port", recording_free_port)
    gc.disable()  # garbage left by the failed launch stays until the next launch forks, as it may
    try:
        with pytest.raises(LaunchedProcessError) as info:
            debug_launcher(fail_on_rank_one, num_processes=2)
        # The failure is still held (pytest.raises here; a notebook keeps it in sys.last_value),
        # but the launch's rendezvous store is gone: its port is free again.
        assert port_is_free(ports[0]), "the failed launch's rendezvous TCPStore outlived the launch"
        # The failure, kept in a reference cycle, becomes garbage the parent has not collected yet
        # when the next launch forks; the new processes collect it (collect_then_wait).
        cycle: list[Any] = [info.value]
        cycle.append(cycle)
        del cycle, info
        debug_launcher(collect_then_wait, num_processes=2)
    finally:
        gc.enable()
