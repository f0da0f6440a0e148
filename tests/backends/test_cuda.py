"""CUDA / NCCL paths. They skip cleanly on machines without a GPU (markers in conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from accelerate import Accelerator
from tests.training_helpers import global_batches, make_model


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["fp16", "bf16"])
def test_single_gpu_training_matches_torch_amp(mode: str) -> None:
    """Through the Accelerator, the same steps as a hand-written torch.amp loop, on the GPU."""
    from accelerate.state import reset_state

    dtype = torch.float16 if mode == "fp16" else torch.bfloat16
    torch.manual_seed(0)
    raw = make_model().cuda()
    raw_opt = torch.optim.AdamW(raw.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cuda", enabled=mode == "fp16")
    raw_losses = []
    for x, y in global_batches(20, 16):
        raw_opt.zero_grad()
        with torch.autocast("cuda", dtype=dtype):
            out = raw(x.cuda())
        loss = F.mse_loss(out.float(), y.cuda())
        scaler.scale(loss).backward()
        scaler.step(raw_opt)
        scaler.update()
        raw_losses.append(loss.item())

    reset_state()
    torch.manual_seed(0)
    accelerator = Accelerator(mixed_precision=mode)
    assert accelerator.device.type == "cuda"
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    assert next(model.parameters()).device.type == "cuda"
    losses = []
    for x, y in global_batches(20, 16):
        optimizer.zero_grad()
        out = model(x.to(accelerator.device))
        assert out.dtype == torch.float32
        loss = F.mse_loss(out, y.to(accelerator.device))
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    torch.testing.assert_close(losses, raw_losses, rtol=1e-3, atol=1e-4)


@pytest.mark.cuda
def test_cpu_flag_forces_cpu_even_with_gpu() -> None:
    assert Accelerator(cpu=True).device.type == "cpu"


_NCCL_SCRIPT = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from accelerate import Accelerator
    from accelerate.utils import gather
    acc = Accelerator()
    assert dist.get_backend() == "nccl", dist.get_backend()
    assert acc.device == torch.device("cuda", acc.local_process_index)
    out = gather(torch.tensor([acc.process_index], device=acc.device))
    assert out.tolist() == list(range(acc.num_processes)), out
    model = acc.prepare(torch.nn.Linear(4, 4))
    acc.backward(model(torch.ones(2, 4, device=acc.device)).sum())
    acc.print("NCCL OK", acc.num_processes)
    acc.end_training()
    """
)


@pytest.mark.multi_gpu
def test_two_gpus_through_accelerate_launch(tmp_path: Path) -> None:
    script = tmp_path / "nccl_check.py"
    script.write_text(_NCCL_SCRIPT)
    launcher = Path(sys.executable).with_name("accelerate")
    proc = subprocess.run(
        [str(launcher), "launch", "--num_processes", "2", str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "NCCL OK 2" in proc.stdout
