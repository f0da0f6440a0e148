"""Two processes sharing one CUDA GPU over gloo: collectives of CUDA tensors, a DDP step, save/load state.

NCCL cannot put two ranks on one device, so this is how one GPU exercises the multi-process paths with
CUDA tensors: `accelerate launch --num_processes 2` and `InitProcessGroupKwargs(backend="gloo")` in the
script (both ranks pick cuda:0). NCCL with two ranks is a ``multi_gpu`` test. Marked ``cuda``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands.helpers import reserved_port, run_cli

pytestmark = pytest.mark.cuda

SCRIPT = Path(__file__).resolve().parent / "scripts" / "gloo_cuda_two_proc.py"


def test_two_processes_on_one_gpu_over_gloo(tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    with reserved_port() as port:
        result = run_cli("launch", "--num_processes", "2", "--main_process_port", str(port), str(SCRIPT), str(out),
                         home=tmp_path, timeout=140)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for rank, row in enumerate(rows):
        assert (row["rank"], row["num_processes"], row["backend"], row["device"]) == (
            rank,
            2,
            "gloo",
            "cuda:0",
        )
        failed = {name: why for name, why in row["checks"].items() if why != "ok"}
        assert not failed, f"rank {rank}: {failed}"
        assert list(row["checks"]) == ["gather", "reduce", "broadcast", "ddp_step", "save_load_state"]
