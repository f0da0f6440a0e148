"""Context parallelism on 2 GPUs (torch's ring attention has no CPU kernel): skipped without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.commands.helpers import reserved_port, run_cli

SCRIPT = Path(__file__).resolve().parent / "scripts" / "context_parallel_attention.py"


@pytest.mark.multi_gpu
def test_context_parallel_attention_matches_the_unsharded_run(tmp_path: Path) -> None:
    out = tmp_path / "results"
    out.mkdir()
    with reserved_port() as port:
        result = run_cli("launch", "--num_processes", "2", "--main_process_port", str(port),
                         "--use_parallelism_config", "--parallelism_config_cp_size", "2",
                         str(SCRIPT), str(out), home=tmp_path, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [row["cp_rank"] for row in rows] == [0, 1]
    for row in rows:
        assert row["local_len"] == 32, row  # each rank attended with half of the sequence's queries
        assert row["shape"] == [2, 4, 64, 16]
        assert row["max_diff"] < 1e-4, row  # fp32: the ring's log-sum-exp merge is exact up to rounding
